"""Importance inspection: has a Palimpsa layer left the Mamba2 limit, and where?

A Palimpsa layer is its Mamba2 layer while its importance ``I`` stays at the prior ``I_prior`` (palimpsa-math
section 4). This module runs a probe (a passkey or NIAH prompt, or the user's text, optionally with a marked
needle) through a model, captures every Palimpsa layer's input and recomputes what that layer's scan sees, and
reports per layer and head:

- ``I`` at the question (the last probe token): mean, quantiles, max, and the share of cells above ``2 I_prior``
  and ``10 I_prior``;
- the gain (``beta_scale`` times the learned per-head gain) and ``beta / (1 - a)``, the importance gained per
  unit of forgetting averaged over the probe's tokens and channels;
- Mamba2's memory horizon ``1 / mean(dt |A|)`` (tokens over which a write decays by e);
- for the needle's cells (every cell weighted by how much the needle wrote into it, ``sum |v*_t k_t|`` over the
  needle's tokens): their importance right after the needle and at the question, the share of them (so weighted)
  above ``2 I_prior`` at both times, and the half-life the importance
  adds to what they hold. With no later writes a cell's readout ``M / I`` after ``n`` tokens of decay ``A_n`` is
  ``mu_0 / (1 + (1 / A_n - 1) I_prior / I_0)``: it halves at ``ln(1 + I_0 / I_prior) / rate`` tokens against
  Mamba2's ``ln 2 / rate``, so the importance adds ``ln((1 + I_0 / I_prior) / 2) / rate`` tokens (``rate`` the
  mean ``dt |A|`` after the needle);
- ``beta k^2`` (the importance written per token, averaged over the head's cells) on needle tokens against the
  other tokens: how much more the gate writes where the information is.

``inspect-importance`` prints the per-layer table, writes the per-head JSON and a layers x heads heatmap; the
trainer logs :func:`layer_summary` figures during fine-tuning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import PalimpsaError

QUANTILES = (0.5, 0.9, 0.99)
THRESHOLDS = (2.0, 10.0)  # in units of the importance prior


@dataclass
class Probe:
    """Token ids ``[1, T]`` and the needle's token span ``[start, end)`` (None: no needle marked)."""

    input_ids: torch.Tensor
    needle: tuple[int, int] | None
    description: str


def _token_span(tokenizer, text: str, start: int, end: int) -> tuple[int, int]:
    """Token span of the characters ``text[start:end]``, with ``text`` tokenised without special tokens."""
    def count(prefix: str) -> int:
        return len(tokenizer(prefix, add_special_tokens=False)["input_ids"])

    return count(text[:start]), count(text[:end])


def probe_from_text(tokenizer, text: str, needle: str | None, description: str,
                    max_tokens: int | None = None) -> Probe:
    """A probe over ``text`` (cut to ``max_tokens``); ``needle``, when given, must occur in it."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if max_tokens is not None:
        ids = ids[:, :max_tokens]
    if ids.shape[1] < 2:
        raise PalimpsaError(f"the probe ({description}) has {ids.shape[1]} token(s); give at least 2")
    span = None
    if needle:
        where = text.find(needle)
        if where < 0:
            raise PalimpsaError(f"--needle {needle!r} does not occur in the probe text; give a part of the text")
        span = _token_span(tokenizer, text, where, where + len(needle))
        if span[0] >= ids.shape[1]:
            raise PalimpsaError(f"--needle lies beyond the probe's first {ids.shape[1]} tokens; raise --length")
        span = (span[0], min(span[1], ids.shape[1]))
    return Probe(ids, span, description)


def task_probe(tokenizer, task: str, length: int, depth: float = 0.5, seed: int = 0) -> Probe:
    """A passkey or NIAH prompt of about ``length`` tokens with its needle at ``depth`` (the question at the end)."""
    from .tasks import niah_samples, passkey_samples

    if task == "passkey":
        sample = passkey_samples(tokenizer, [length], [depth], 1, seed)[0]
        needle = f"The pass key is {sample.answer}. Remember it. {sample.answer} is the pass key."
    elif task == "niah":
        sample = niah_samples(tokenizer, [length], [depth], 1, seed)[0]
        start = sample.prompt.find("One of the special magic numbers")
        needle = sample.prompt[start : sample.prompt.index(".", sample.prompt.index(sample.answer)) + 1]
    else:
        raise PalimpsaError(f"unknown probe task {task!r}; choose passkey or niah")
    return probe_from_text(tokenizer, sample.prompt, needle, f"{task} prompt, {length} tokens, needle at depth "
                           f"{depth:g}, seed {seed}")


@torch.no_grad()
def inspect_importance(model, probe: Probe) -> dict:
    """Per layer and head statistics of the importance on ``probe`` (see the module docstring); JSON-ready."""
    from ..model.modeling import palimpsa_mixers_of
    from ..model.sharding import gathered

    mixers = palimpsa_mixers_of(model)
    if not mixers:
        raise PalimpsaError("the model has no Palimpsa layer; upgrade it first with upgrade-model")
    if any(mixer.beta_dropped for mixer in mixers):
        raise PalimpsaError("the model's Palimpsa layers run with beta dropped; inspect it outside beta_dropped()")
    config = mixers[0].config
    captured: dict[int, torch.Tensor] = {}
    hooks = [mixer.register_forward_pre_hook(
        lambda module, args, index=index: captured.__setitem__(index, args[0].detach()))
        for index, mixer in enumerate(mixers)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        model(input_ids=probe.input_ids.to(device))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    prior = float(config.importance_prior)
    layers = []
    for index, mixer in enumerate(mixers):
        # the statistics call the mixer's own methods, outside the forward in which FSDP gathers its weights
        with gathered(model, holding=mixer):
            head, at_question = _layer_statistics(mixer, captured[index], probe.needle, prior)
        layers.append({"layer": mixer.layer_idx, "heads": head, "summary": _summarise(head, at_question, prior)})
    return {"probe": probe.description, "tokens": int(probe.input_ids.shape[1]), "needle": list(probe.needle)
            if probe.needle else None, "importance_prior": prior, "beta_form": config.beta_form,
            "beta_scale": float(mixers[0].beta_scale), "layers": layers}


def _layer_statistics(mixer, hidden_states: torch.Tensor, needle: tuple[int, int] | None,
                      prior: float) -> tuple[dict, torch.Tensor]:
    """Per-head figures of one Palimpsa layer on its captured input, and its importance at the question."""
    from palimpsa.kernels import palimpsa_scan

    inputs = mixer.scan_inputs(hidden_states)
    value = inputs.x_heads.float() * inputs.dt[..., None]
    log_decay = inputs.dt * inputs.A
    beta = inputs.beta.float()
    keys = inputs.keys.float().repeat_interleave(mixer.nheads // mixer.ngroups, dim=2)  # [1, T, H, N]
    rate = -log_decay[0]  # dt |A| per token, [T, H]
    length = value.shape[1]
    # Without gradients on the CPU the sequential reference is faster than the chunked path.
    backend = "naive" if value.device.type == "cpu" else "auto"

    def final_state(start: int, end: int, state):
        return palimpsa_scan(value[:, start:end], inputs.keys[:, start:end], inputs.queries[:, start:end],
                             log_decay[:, start:end], beta[:, start:end], importance_prior=prior, initial_state=state,
                             output_final_state=True, backend=backend).final_state

    if needle is not None and needle[1] < length:
        after_needle = final_state(0, needle[1], None)
        at_question = final_state(needle[1], length, after_needle)[1][0].float()  # [H, P, N]
    else:
        after_needle = final_state(0, length, None)
        at_question = after_needle[1][0].float()
    cells = at_question.flatten(1)
    forgetting = -torch.expm1(log_decay)[..., None]  # 1 - a, [1, T, H, 1]
    head = {
        "gain": (mixer.beta_scale * mixer.gain().float()).tolist(),
        "beta_per_forgetting": (beta / forgetting.clamp_min(1e-30)).mean(dim=(0, 1, 3)).tolist(),
        "horizon_tokens": (1.0 / rate.mean(0).clamp_min(1e-30)).tolist(),
        "mean": cells.mean(1).tolist(),
        **{f"q{round(q * 100)}": torch.quantile(cells, q, dim=1).tolist() for q in QUANTILES},
        "max": cells.amax(1).tolist(),
        **{f"share_above_{t:g}x_prior": (cells / prior > t).float().mean(1).tolist() for t in THRESHOLDS},
    }
    if needle is not None:
        start, end = needle
        # how much of the needle each cell holds: sum over its tokens of |v*| (x) |k|, normalised per head
        weight = torch.einsum("thp,thn->hpn", value[0, start:end].abs(), keys[0, start:end].abs())
        weight = weight / weight.flatten(1).sum(1).clamp_min(1e-30)[:, None, None]
        needle_importance = (weight * after_needle[1][0].float()).flatten(1).sum(1)
        later_rate = rate[end:].mean(0) if end < length else rate.mean(0)
        written = beta[0].mean(-1) * keys[0].pow(2).mean(-1)  # beta k^2 averaged over a head's cells, [T, H]
        others = torch.ones(length, dtype=torch.bool, device=written.device)
        others[start:end] = False
        head.update({
            "needle_importance": needle_importance.tolist(),
            "needle_importance_at_question": (weight * at_question).flatten(1).sum(1).tolist(),
            # the needle's cells (weighted as above) whose importance is above 2 I_prior, after it and at the question
            "needle_share_above_2x_prior": (weight * (after_needle[1][0].float() > 2 * prior)).flatten(1).sum(1)
            .tolist(),
            "needle_share_above_2x_prior_at_question": (weight * (at_question > 2 * prior)).flatten(1).sum(1).tolist(),
            "needle_half_life_added": (torch.log((1 + needle_importance / prior) / 2)
                                       / later_rate.clamp_min(1e-30)).tolist(),
            "beta_k2_needle": written[start:end].mean(0).tolist(),
            "beta_k2_other": (written[others].mean(0) if others.any() else torch.full_like(rate[0], math.nan))
            .tolist(),
        })
    return head, at_question


def _summarise(head: dict, at_question: torch.Tensor, prior: float) -> dict:
    """One row per layer: over all of its heads' cells (means of per-head figures where a cell figure is not)."""
    cells = at_question.flatten()
    gains = torch.tensor(head["gain"])
    row = {
        "gain_geomean": math.exp(gains.clamp_min(1e-30).log().mean().item()),
        "gain_min": gains.min().item(), "gain_max": gains.max().item(),
        "beta_per_forgetting": sum(head["beta_per_forgetting"]) / len(head["beta_per_forgetting"]),
        "horizon_tokens": sum(head["horizon_tokens"]) / len(head["horizon_tokens"]),
        "mean_excess": cells.mean().item() / prior - 1,
        "q99": torch.quantile(cells[:: max(1, cells.numel() // (1 << 24))], 0.99).item(),
        "max": cells.max().item(),
        **{f"share_above_{t:g}x_prior": (cells / prior > t).float().mean().item() for t in THRESHOLDS},
    }
    if "needle_importance" in head:
        row["needle_importance"] = sum(head["needle_importance"]) / len(head["needle_importance"])
        row["needle_half_life_added"] = sum(head["needle_half_life_added"]) / len(head["needle_half_life_added"])
        for key in ("needle_share_above_2x_prior", "needle_share_above_2x_prior_at_question"):
            row[key] = sum(head[key]) / len(head[key])
        other = torch.tensor(head["beta_k2_other"]).mean().item()
        row["needle_write_ratio"] = torch.tensor(head["beta_k2_needle"]).mean().item() / other if other > 0 \
            else math.nan
    return row


def layer_summary(report: dict) -> dict[str, float]:
    """Flat per-layer figures for training logs: ``importance/L{layer}/{name}``."""
    keys = ("gain_geomean", "mean_excess", "share_above_2x_prior", "needle_importance", "needle_half_life_added")
    return {f"importance/L{layer['layer']}/{key}": layer["summary"][key] for layer in report["layers"]
            for key in keys if key in layer["summary"]}


def summary_table(report: dict) -> str:
    """The per-layer table ``inspect-importance`` prints."""
    needle = report["needle"] is not None
    header = (f"{'layer':>5} {'gain':>17} {'beta/(1-a)':>10} {'horizon':>8} {'mean I-Ip':>9} {'q99 I':>7} "
              f"{'max I':>7} {'I>2Ip':>6} {'I>10Ip':>6}")
    if needle:
        header += f" {'needle I':>8} {'+half-life':>10} {'write n/o':>9}"
    lines = [f"importance on {report['probe']} ({report['tokens']} tokens); I_prior {report['importance_prior']:g}, "
             f"beta scale {report['beta_scale']:g}, gain form {report['beta_form']}", header]
    for layer in report["layers"]:
        s = layer["summary"]
        line = (f"{layer['layer']:>5} {s['gain_min']:>8.3g}-{s['gain_max']:<8.3g} {s['beta_per_forgetting']:>10.3g} "
                f"{s['horizon_tokens']:>8.3g} {s['mean_excess']:>9.3g} {s['q99']:>7.3g} {s['max']:>7.3g} "
                f"{s['share_above_2x_prior']:>6.1%} {s['share_above_10x_prior']:>6.1%}")
        if needle:
            line += (f" {s['needle_importance']:>8.3g} {s['needle_half_life_added']:>10.3g} "
                     f"{s['needle_write_ratio']:>9.3g}")
        lines.append(line)
    limit = max(layer["summary"]["mean_excess"] for layer in report["layers"])
    verdict = ("every layer is within 1e-2 of the Mamba2 limit (I = I_prior)" if limit < 1e-2 else
               "importance departs from the prior (mean I - I_prior up to " f"{limit:.3g})")
    lines.append(f"{verdict}. gain: min-max over heads; horizon: Mamba2's 1/mean(dt|A|) in tokens; +half-life: "
                 "tokens the importance adds to the needle's cells; write n/o: beta k^2 on needle / other tokens")
    return "\n".join(lines)


def head_table(report: dict) -> str:
    """One row per head of every layer (``inspect-importance --per-head``)."""
    needle = report["needle"] is not None
    header = (f"{'layer':>5} {'head':>4} {'gain':>9} {'beta/(1-a)':>10} {'horizon':>8} {'mean I':>8} {'q99 I':>7} "
              f"{'max I':>7} {'I>2Ip':>6} {'I>10Ip':>6}" + (f" {'needle I':>8} {'+half-life':>10}" if needle else ""))
    lines = [header]
    for layer in report["layers"]:
        h = layer["heads"]
        for i in range(len(h["gain"])):
            line = (f"{layer['layer']:>5} {i:>4} {h['gain'][i]:>9.3g} {h['beta_per_forgetting'][i]:>10.3g} "
                    f"{h['horizon_tokens'][i]:>8.3g} {h['mean'][i]:>8.4g} {h['q99'][i]:>7.3g} {h['max'][i]:>7.3g} "
                    f"{h['share_above_2x_prior'][i]:>6.1%} {h['share_above_10x_prior'][i]:>6.1%}")
            if needle:
                line += f" {h['needle_importance'][i]:>8.3g} {h['needle_half_life_added'][i]:>10.3g}"
            lines.append(line)
    return "\n".join(lines)


def plot_importance(report: dict, path: Path) -> None:
    """Heatmaps, layers x heads: mean excess importance (log scale) and the share of cells above 2 I_prior."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    layers = [layer["layer"] for layer in report["layers"]]
    prior = report["importance_prior"]
    excess = torch.tensor([[m / prior - 1 for m in layer["heads"]["mean"]] for layer in report["layers"]])
    share = torch.tensor([layer["heads"]["share_above_2x_prior"] for layer in report["layers"]])
    heads = excess.shape[1]
    figure, axes = plt.subplots(1, 2, figsize=(min(4 + 0.32 * heads, 24) * 1.6, 1.8 + 0.38 * len(layers)))
    floor = 1e-6
    panels = ((excess.clamp_min(floor), "mean I / I_prior - 1 at the question (log; Mamba2 limit = 0)",
               LogNorm(vmin=floor, vmax=max(10.0, excess.max().item())), "magma", "{:.2g}"),
              (share, "share of cells with I > 2 I_prior", None, "viridis", "{:.0%}"))
    for axis, (values, title, norm, cmap, fmt) in zip(axes, panels):
        image = axis.imshow(values.numpy(), aspect="auto", cmap=cmap, norm=norm,
                            **({} if norm else {"vmin": 0, "vmax": 1}))
        axis.set_yticks(range(len(layers)), [f"layer {i}" for i in layers])
        axis.set_xlabel("head")
        axis.set_title(title, fontsize=9)
        if heads * len(layers) <= 400:
            scaled = image.norm(values.numpy())
            for row in range(len(layers)):
                for column in range(heads):
                    axis.text(column, row, fmt.format(values[row, column].item()), ha="center", va="center",
                              fontsize=6, color="black" if scaled[row, column] > 0.6 else "white")
        figure.colorbar(image, ax=axis)
    figure.suptitle(f"Importance on {report['probe']}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
