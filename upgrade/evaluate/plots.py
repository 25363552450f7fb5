"""Plots for evaluation results (matplotlib, written to PNG without a display)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# a curve drawn on top of an earlier one: dashed, with hollow markers of another shape, so that both stay visible
_OVER = [dict(linestyle="--", marker=marker, markersize=6, markerfacecolor="none") for marker in "sD^v"]


def coinciding(curves: dict[str, tuple[list, list]], tolerance: float = 2e-3) -> dict[str, str]:
    """Curve name -> the earlier curve it lies on: same x values and y values within ``tolerance`` times the span of
    all y values (at that distance two lines of a plot print on the same pixels)."""
    values = [y for _, ys in curves.values() for y in ys]
    span = (max(values) - min(values)) if values else 0.0
    limit = tolerance * (span or 1.0)
    hidden, seen = {}, []
    for name, (xs, ys) in curves.items():
        under = next((other for other in seen if curves[other][0] == xs and len(curves[other][1]) == len(ys)
                      and all(abs(a - b) <= limit for a, b in zip(curves[other][1], ys))), None)
        if under is not None:
            hidden[name] = hidden.get(under, under)
        seen.append(name)
    return hidden


def plot_nll(results: list[dict], train_length: int | None, path: Path) -> dict[str, str]:
    """Mean NLL per position bucket, one curve per model, a marker at the training length.

    Curves that coincide (a model at beta scale 0 and the Mamba2 it came from, say) would hide one another: each
    later one is drawn dashed with hollow markers and its legend entry says which curve it lies on. Returns those
    (curve -> the curve it lies on)."""
    curves = {}
    for result in results:
        data = result["nll_position"]
        curves[result["name"]] = ([(a + b) / 2 for a, b in zip(data["bucket_start"], data["bucket_end"])],
                                  data["mean_nll"])
    hidden = coinciding(curves)
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for index, (name, (centres, values)) in enumerate(curves.items()):
        if name in hidden:
            axis.plot(centres, values, label=f"{name} (on top of {hidden[name]}: the curves coincide)",
                      **_OVER[index % len(_OVER)])
        else:
            axis.plot(centres, values, "o-", markersize=3, label=name)
    if train_length:
        axis.axvline(train_length, color="grey", linestyle="--", label=f"training length {train_length}")
    axis.set_xlabel("position (tokens)")
    axis.set_ylabel("mean NLL (nats)")
    axis.set_title("Per-token NLL against position (state carried across segments)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return hidden


def plot_grid(grid: dict, title: str, path: Path) -> None:
    """Accuracy heatmap: depth (rows) x length (columns), each cell annotated."""
    accuracy = grid["accuracy"]
    figure, axis = plt.subplots(figsize=(1.2 + 0.9 * len(grid["lengths"]), 1.2 + 0.6 * len(grid["depths"])))
    image = axis.imshow(accuracy, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    axis.set_xticks(range(len(grid["lengths"])), [str(n) for n in grid["lengths"]])
    axis.set_yticks(range(len(grid["depths"])), [f"{d:.0%}" for d in grid["depths"]])
    axis.set_xlabel("context length (tokens)")
    axis.set_ylabel("needle depth")
    for row, values in enumerate(accuracy):
        for column, value in enumerate(values):
            axis.text(column, row, f"{value:.0%}", ha="center", va="center", fontsize=8)
    figure.colorbar(image, ax=axis, label="accuracy")
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_lines(series: dict[str, tuple[list, list]], title: str, xlabel: str, path: Path, log_x: bool = False) -> None:
    """Accuracy curves, one per entry of ``series`` (label -> (x values, accuracies))."""
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for label, (xs, ys) in series.items():
        axis.plot(xs, ys, "o-", label=label)
    if log_x:
        axis.set_xscale("log", base=2)
    axis.set_ylim(-0.05, 1.05)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("accuracy")
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_sweep(result, path: Path, title: str) -> None:
    """Log-log plot of max |logit diff| against beta scale, with a slope-1 guide and the value at 0."""
    rows = [r for r in result.rows if r["scale"] > 0]
    scales = [r["scale"] for r in rows]
    diffs = [max(r["max_abs_diff"], 1e-300) for r in rows]
    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    axis.loglog(scales, diffs, "o-", label="max |logit diff| vs beta-dropped Mamba2")
    if result.fitted_scales:
        anchor_scale = result.fitted_scales[0]
        anchor = next(r["max_abs_diff"] for r in rows if r["scale"] == anchor_scale)
        guide = [anchor * s / anchor_scale for s in scales]
        axis.loglog(scales, guide, "--", color="grey", label="slope 1")
    zero = result.rows[-1]["max_abs_diff"]
    if zero > 0:
        axis.axhline(zero, color="tab:red", linestyle=":", label=f"at scale 0: {zero:.2g}")
    slope = "n/a" if result.slope is None else f"{result.slope:.3f}"
    axis.set_title(f"{title}\nslope {slope}, limit {'OK' if result.limit_ok else 'FAILED'} ({result.dtype})")
    axis.set_xlabel("beta scale")
    axis.set_ylabel("max |logit difference|")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
