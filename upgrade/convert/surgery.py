"""Surgery: choose layers and turn their Mamba2 mixers into Palimpsa mixers, in place, sharing every weight."""

from __future__ import annotations

import math

import torch

from ..errors import PalimpsaError
from ..model.modeling import PalimpsaForCausalLM, PalimpsaMixer

STRATEGIES = ("even", "first", "last")


def parse_layer_spec(spec: str, n_layer: int, strategy: str = "even") -> list[int]:
    """Turn ``--layers`` into sorted layer indices.

    ``spec`` is either a count (``"8"``: that many layers, placed by ``strategy``) or a comma list of indices and
    inclusive ranges (``"3,11,19"``, ``"48-63"``, ``"0,10-12"``). Raises PalimpsaError on out-of-range, duplicate,
    empty or too many layers.
    """
    if strategy not in STRATEGIES:
        raise PalimpsaError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    text = spec.strip()
    if not text:
        raise PalimpsaError("--layers is empty; give a count (8) or indices and ranges (3,11,19 or 48-63)")
    if text.isdigit():  # a lone number is a count; one explicit layer is written as a range, e.g. 5-5
        return spread_layers(int(text), n_layer, strategy)
    layers: list[int] = []
    for part in text.split(","):
        part = part.strip()
        bounds = part.split("-")
        if not part or len(bounds) > 2 or not all(b.strip().isdigit() for b in bounds):
            raise PalimpsaError(f"--layers: cannot read {part!r}; use indices and ranges like 3,11,19 or 48-63")
        low, high = int(bounds[0]), int(bounds[-1])
        if high < low:
            raise PalimpsaError(f"--layers: range {part} runs backwards; write it as {high}-{low}")
        layers.extend(range(low, high + 1))
    outside = sorted({i for i in layers if i >= n_layer})
    if outside:
        raise PalimpsaError(f"--layers: {outside} outside the model's layers 0-{n_layer - 1}")
    repeated = sorted({i for i in layers if layers.count(i) > 1})
    if repeated:
        raise PalimpsaError(f"--layers: layer(s) {repeated} listed more than once")
    return sorted(layers)


def spread_layers(count: int, n_layer: int, strategy: str = "even") -> list[int]:
    """``count`` layer indices: spread over depth (``even``), or the first or last ``count`` layers."""
    if count < 1:
        raise PalimpsaError("--layers: the count must be at least 1")
    if count > n_layer:
        raise PalimpsaError(f"--layers: asked for {count} layers but the model has {n_layer}")
    if strategy == "first":
        return list(range(count))
    if strategy == "last":
        return list(range(n_layer - count, n_layer))
    # Centre each chosen layer in one of `count` equal slices of the depth.
    return [int((index + 0.5) * n_layer / count) for index in range(count)]


def convert_layers(model: PalimpsaForCausalLM, layers: list[int], *, beta_init: float = 1e-3,
                   beta_rank: int = 16, seed: int = 0) -> PalimpsaForCausalLM:
    """Replace the Mamba2 mixers of ``layers`` by Palimpsa mixers, in place, and record them in the config.

    The new mixer adopts the old one's parameters (same tensors, no copy) and adds only ``beta_down``,
    ``beta_up`` and ``beta_log_gain``, created in the model's dtype and device with ``beta_init`` as the per-head
    gain (importance per unit of forgetting; ``seed`` fixes ``beta_down``'s random draw). The model's
    ``beta_scale`` is reset to 1.
    """
    config = model.config
    layers = [int(i) for i in layers]
    outside = sorted({i for i in layers if not 0 <= i < config.n_layer})
    if outside:
        raise PalimpsaError(f"layers {outside} are outside the model's layers 0-{config.n_layer - 1}")
    if len(set(layers)) != len(layers):
        raise PalimpsaError(f"a layer is listed more than once: {layers}")
    already = sorted(i for i in layers if i in config.upgraded_layers
                     or isinstance(model.backbone.layers[i].mixer, PalimpsaMixer))
    if already:
        raise PalimpsaError(f"layers {already} are Palimpsa layers already")
    if beta_rank < 1:
        raise PalimpsaError(f"--beta-rank must be >= 1, got {beta_rank}")
    if not (math.isfinite(beta_init) and beta_init > 0):
        raise PalimpsaError(f"--beta-init must be a finite number > 0 (the gain is learned in log space, where 0 "
                            f"would never move), got {beta_init}")
    config.upgraded_layers = sorted([*config.upgraded_layers, *layers])
    config.beta_init, config.beta_rank, config.beta_scale = float(beta_init), int(beta_rank), 1.0
    with torch.random.fork_rng(devices=[]):  # seed the beta init without touching the caller's random state
        torch.manual_seed(seed)
        _replace_mixers(model, layers, beta_init)
    model.set_beta_scale(1.0)
    return model


def _replace_mixers(model: PalimpsaForCausalLM, layers: list[int], beta_init: float) -> None:
    config = model.config
    for index in layers:
        block = model.backbone.layers[index]
        old = block.mixer
        reference = old.in_proj.weight
        with torch.device("meta"):
            new = PalimpsaMixer(config, index)
        new.load_state_dict(old.state_dict(), strict=False, assign=True)
        for module in (new.beta_down, new.beta_up, new):
            for name, param in list(module.named_parameters(recurse=False)):
                if param.is_meta:
                    fresh = torch.empty(param.shape, dtype=reference.dtype, device=reference.device)
                    setattr(module, name, torch.nn.Parameter(fresh))
        new.init_beta_parameters(beta_init)
        block.mixer = new


def count_new_parameters(model: PalimpsaForCausalLM) -> int:
    return sum(p.numel() for mixer in model.palimpsa_mixers()
               for name, p in mixer.named_parameters() if name.startswith("beta_"))
