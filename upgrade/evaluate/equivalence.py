"""The beta -> 0 sweep: an upgraded model must approach the Mamba2 it holds linearly in beta, and equal it at 0.

Reference: the model's own weights run with every Palimpsa layer as a plain Mamba2 layer
(``model.beta_dropped()``). For a freshly upgraded model that is the base model; after fine-tuning it differs from
the base by the fine-tuning, which the sweep reports separately (KL and top-1 agreement with the base).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..convert.compare import compare_logits, probe_logits
from ..errors import PalimpsaError
from ..io.dtypes import dtype_name, parse_dtype

SLOPE_RANGE = (0.9, 1.1)
# The difference at scale 0 must sit at the float rounding floor of the dtype the sweep runs in.
ZERO_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


@dataclass
class SweepResult:
    rows: list[dict]  # scale, max_abs_diff, relative_diff, mean_kl, top1 (vs the beta-dropped reference), vs base
    slope: float | None
    fitted_scales: list[float]
    at_zero: float  # relative max |logit diff| at scale exactly 0
    dtype: str
    own_scale: float

    @property
    def limit_ok(self) -> bool:
        tolerance = ZERO_TOLERANCE[parse_dtype(self.dtype)]
        slope_ok = self.slope is not None and SLOPE_RANGE[0] <= self.slope <= SLOPE_RANGE[1]
        return slope_ok and self.at_zero <= tolerance

    def as_dict(self) -> dict:
        return {"slope": self.slope, "slope_range": list(SLOPE_RANGE), "fitted_scales": self.fitted_scales,
                "at_zero": self.at_zero, "zero_tolerance": ZERO_TOLERANCE[parse_dtype(self.dtype)],
                "limit_ok": self.limit_ok, "dtype": self.dtype, "own_scale": self.own_scale, "table": self.rows}


def sweep_scales(own_scale: float, decades: int = 8) -> list[float]:
    """The model's own scale, then ``decades`` decades below it, then exactly 0."""
    own = own_scale if own_scale > 0 else 1.0
    return [own * 10.0**-i for i in range(decades + 1)] + [0.0]


def fit_slope(scales: list[float], diffs: list[float], floor: float) -> tuple[float | None, list[float]]:
    """Least-squares slope of log(diff) on log(scale) over the small-scale end.

    Points closer than 100x to the rounding floor (the difference at scale 0) are left out; the fit uses the
    (up to) five smallest scales that remain.
    """
    points = [(s, d) for s, d in zip(scales, diffs) if s > 0 and d > 100 * max(floor, 1e-300)]
    points = sorted(points)[:5]
    if len(points) < 3:
        return None, [s for s, _ in points]
    xs = [math.log10(s) for s, _ in points]
    ys = [math.log10(d) for _, d in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return slope, [s for s, _ in points]


def run_sweep(model, probe: torch.Tensor, base=None, decades: int = 8, progress: bool = False) -> SweepResult:
    """Sweep ``model``'s beta scale; ``base`` (optional) is the original Mamba2 for the fine-tuning figures."""
    from tqdm.auto import tqdm

    if not model.palimpsa_mixers():
        raise PalimpsaError("the model has no Palimpsa layer; there is no beta to sweep")
    own_scale = model.config.beta_scale
    with model.beta_dropped():
        reference = probe_logits(model, probe)
    base_logits = probe_logits(base, probe) if base is not None else None
    rows = []
    scales = sweep_scales(own_scale, decades)
    for scale in tqdm(scales, desc="beta sweep", disable=not progress):
        with model.beta_scaled(scale):
            logits = probe_logits(model, probe)
        row = {"scale": scale, **compare_logits(reference, logits).as_dict()}
        if base_logits is not None:
            versus_base = compare_logits(base_logits, logits)
            row["base_mean_kl"], row["base_top1_agreement"] = versus_base.mean_kl, versus_base.top1_agreement
        rows.append(row)
    at_zero = rows[-1]["relative_diff"]
    slope, fitted = fit_slope([r["scale"] for r in rows], [r["max_abs_diff"] for r in rows], rows[-1]["max_abs_diff"])
    dtype = dtype_name(next(model.parameters()).dtype)
    return SweepResult(rows, slope, fitted, at_zero, dtype, own_scale)


def probe_from_text(path: Path, tokenizer, batch: int, length: int) -> torch.Tensor:
    """``batch`` consecutive windows of ``length`` tokens from a text file."""
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        raise PalimpsaError(f"cannot read probe file {path}: {error.strerror}") from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"][0]
    if ids.numel() < batch * length:
        raise PalimpsaError(f"probe file {path} has {ids.numel()} tokens; need {batch * length} "
                            "(--probe-batch x --probe-length)")
    return ids[: batch * length].view(batch, length)


def sweep_dtype(model, choice: str) -> torch.dtype:
    """float64 when asked, or when ``auto`` and a float64 copy takes under a third of this machine's memory."""
    if choice != "auto":
        return parse_dtype(choice)
    needed = sum(p.numel() for p in model.parameters()) * 8
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    return torch.float64 if total and needed < total / 3 else torch.float32
