"""The upgrade job: load -> plan -> convert -> verify -> write. ``upgrade-model`` is a thin shell around it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import MAX_SEED, PalimpsaError, checked_number
from ..io.dtypes import dtype_name, parse_dtype
from ..io.hub import hub_repository, push_directory
from ..io.model_card import display_name, front_matter, license_of, missing_metadata, usage
from ..io.model_directory import report_header, write_model_directory
from ..io.output import atomic_directory, check_output_directory, write_json_atomic
from ..io.shards import parse_size
from ..model.configuration import PalimpsaConfig
from ..model.modeling import PalimpsaForCausalLM, model_from_state_dict
from .checkpoint import Checkpoint, load_checkpoint
from .compare import EXACT_TOLERANCE, compare_logits, probe_input_ids, probe_logits
from .surgery import convert_layers, count_new_parameters, parse_layer_spec, spread_layers


@dataclass
class UpgradeResult:
    model: PalimpsaForCausalLM
    report: dict
    source_directory: Path  # where the source checkpoint (and its tokenizer) lies, after any hub download
    output: Path | None = None
    files: list[str] = field(default_factory=list)


def upgrade_model(
    source: str | Path,
    layers: int | str | Sequence[int],
    *,
    output: str | Path | None = None,
    strategy: str = "even",
    dtype: str | torch.dtype | None = None,
    beta_init: float = 1e-3,
    beta_rank: int = 16,
    verify: bool = True,
    max_kl: float = 1e-3,
    probe_batch: int = 2,
    probe_length: int = 64,
    seed: int = 0,
    shard_size: str | int = "5GB",
    force: bool = False,
    hub_id: str | None = None,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    token: str | None = None,
    local_files_only: bool | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> UpgradeResult:
    """Load a Mamba2 checkpoint, turn ``layers`` into Palimpsa layers, verify, and (with ``output``) save.

    Args:
        source: local directory or hub id of a mamba_ssm or transformers Mamba2 checkpoint.
        layers: a count (placed by ``strategy``: ``even``, ``first`` or ``last``), a spec string like
            ``"3,11,19"`` or ``"48-63"``, or a list of indices.
        output: directory to write (safetensors, config.json, tokenizer, README.md, upgrade_report.json);
            None keeps the model in memory only.
        dtype: dtype of the result (default: the checkpoint's).
        beta_init: initial per-head gain (importance gained per unit of forgetting, > 0); small keeps the model
            close to the base.
        beta_rank: rank of the token-dependent beta gate.
        verify: compare with the base model on a probe before writing; raises PalimpsaError when
            ``beta_scale = 0`` does not reproduce the base (relative tolerance by dtype, ``EXACT_TOLERANCE``) or
            the model at its initial beta drifts by more than ``max_kl`` nats per token.
        shard_size: largest safetensors shard (``"5GB"``, or bytes).
        force: replace a non-empty ``output``.
        hub_id: the hub repository the model card's snippet loads from (a placeholder without one).
        push_to_hub: a hub repository to create (``private``) and upload ``output`` to once it is written.
        progress, log: progress bars, and a callable that receives the plan and figures line by line.

    Returns:
        An :class:`UpgradeResult` with the model, the report dict and the written files.
    """
    say = log or (lambda _line: None)
    started = time.perf_counter()
    beta_init = checked_number(beta_init, "--beta-init", low=0)
    beta_rank = checked_number(beta_rank, "--beta-rank", int, low=1)
    max_kl = checked_number(max_kl, "--max-kl", low=0)
    probe_batch = checked_number(probe_batch, "probe_batch", int, low=1)
    probe_length = checked_number(probe_length, "--probe-length", int, low=1)
    seed = checked_number(seed, "--seed", int, low=0, high=MAX_SEED)
    output = Path(output).expanduser() if output is not None else None
    max_shard = parse_size(shard_size) if isinstance(shard_size, str) else int(shard_size)
    target_dtype = parse_dtype(dtype)
    repo_id = hub_repository(hub_id, push_to_hub, private)
    if push_to_hub is not None and output is None:
        raise PalimpsaError("--push-to-hub uploads the output directory: give an output")
    if output is not None:
        local_source = Path(source).expanduser()
        check_output_directory(output, force, sources=[local_source] if local_source.exists() else [])
    checkpoint = load_checkpoint(source, revision=revision, cache_dir=cache_dir, token=token,
                                 local_files_only=local_files_only)
    config = checkpoint.config
    chosen = _choose_layers(layers, config.n_layer, strategy)
    stored = checkpoint.stored_dtype()
    target_dtype = target_dtype or stored
    placement = strategy if isinstance(layers, int) or (isinstance(layers, str) and layers.strip().isdigit()) else None
    for line in plan_lines(checkpoint, chosen, placement, stored, target_dtype, beta_init, beta_rank, verify,
                           probe_batch, probe_length, output, max_shard):
        say(line)

    state = checkpoint.load_state_dict(dtype=target_dtype, progress=progress)
    model = model_from_state_dict(config, state, checkpoint.source).eval()
    del state
    probe = probe_input_ids(config.base_vocab_size or config.vocab_size, probe_batch, probe_length, seed)
    base_logits = probe_logits(model, probe) if verify else None

    convert_layers(model, chosen, beta_init=beta_init, beta_rank=beta_rank, seed=seed)
    new_parameters = count_new_parameters(model)
    verification = {"skipped": True}
    if verify:
        say("verifying against the base model ...")
        with model.beta_scaled(0.0):
            at_zero = compare_logits(base_logits, probe_logits(model, probe))
        at_init = compare_logits(base_logits, probe_logits(model, probe))
        tolerance = EXACT_TOLERANCE[target_dtype]
        # written so that NaN fails: every comparison with NaN is false, so `diff > tolerance` would pass it
        zero_ok, init_ok = at_zero.relative_diff <= tolerance, at_init.mean_kl <= max_kl
        verification = {
            "probe": {"batch": probe_batch, "length": probe_length, "seed": seed},
            "at_zero": at_zero.as_dict(),
            "at_init": at_init.as_dict(),
            "tolerance": {"at_zero_relative": tolerance, "at_init_max_kl": max_kl},
            "passed": zero_ok and init_ok,
        }
        say(f"  beta scale 0    : max |logit diff| {at_zero.max_abs_diff:.3g} "
            f"(relative {at_zero.relative_diff:.3g}, tolerance {tolerance:g}), top-1 agreement "
            f"{at_zero.top1_agreement:.1%}")
        say(f"  beta at init    : max |logit diff| {at_init.max_abs_diff:.3g}, mean KL {at_init.mean_kl:.3g} nats "
            f"(tolerance {max_kl:g}), top-1 agreement {at_init.top1_agreement:.1%}")
        if not zero_ok:
            raise PalimpsaError(f"verification failed: with beta scale 0 the logits differ from the base by "
                                f"{at_zero.relative_diff:.3g} (relative) > {tolerance:g}; nothing was written")
        if not init_ok:
            raise PalimpsaError(f"verification failed: at beta_init={beta_init:g} the mean KL to the base is "
                                f"{at_init.mean_kl:.3g} > --max-kl {max_kl:g}; lower --beta-init or raise --max-kl "
                                "(nothing was written)")
    report = build_report(checkpoint, model, chosen, strategy, layers, stored, target_dtype, new_parameters,
                          verification)
    result = UpgradeResult(model, report, checkpoint.directory)
    license = license_of(checkpoint.directory)
    if output is not None:
        say(f"writing {output} ...")
        with atomic_directory(output, force) as staging:
            result.files = write_model_directory(
                staging, model.config, model.state_dict(), report_name="upgrade_report.json", report=report,
                tokenizer=checkpoint.tokenizer_files, card=lambda finished: model_card(finished, repo_id, license),
                max_shard_size=max_shard, progress=progress)
        result.output = output
        # the model now is that directory: a peft adapter made on it names it as its base
        model.name_or_path = model.config.name_or_path = str(output.resolve())
    report["seconds"] = round(time.perf_counter() - started, 2)
    if output is not None:  # the elapsed time is known only now; rewrite the one small file atomically
        write_json_atomic(output / "upgrade_report.json", report)
    if output is not None:
        for note in missing_metadata(repo_id, license):
            say(note)
    say(f"done in {report['seconds']:.1f} s" + (f": {output}" if output is not None else ""))
    if push_to_hub is not None:
        push_directory(output, push_to_hub, private=private, what="upgraded model", log=say)
    return result


def _choose_layers(layers, n_layer: int, strategy: str) -> list[int]:
    if isinstance(layers, bool):
        raise PalimpsaError("layers must be a count, a spec string or a list of indices")
    if isinstance(layers, int):
        return spread_layers(layers, n_layer, strategy)
    if isinstance(layers, str):
        return parse_layer_spec(layers, n_layer, strategy)
    return parse_layer_spec(",".join(f"{int(i)}-{int(i)}" for i in layers), n_layer, strategy)


def describe_dimensions(config: PalimpsaConfig) -> str:
    vocab = f"vocab {config.vocab_size}"
    if config.base_vocab_size and config.base_vocab_size != config.vocab_size:
        vocab += f" ({config.base_vocab_size} padded)"
    extras = [f"d_ssm {config.ssm_dim}"] if config.ssm_dim != config.d_inner else []
    if config.dt_limit is not None:
        extras.append(f"dt_limit {config.dt_limit}")
    extras.append("tied head" if config.tie_word_embeddings else "untied head")
    return (f"{config.n_layer} layers, d_model {config.d_model}, {config.nheads} heads x {config.headdim}, "
            f"d_state {config.d_state}, ngroups {config.ngroups}, {vocab}, " + ", ".join(extras))


def plan_lines(checkpoint: Checkpoint, chosen, strategy, stored, target, beta_init, beta_rank, verify,
               probe_batch, probe_length, output, max_shard) -> list[str]:
    config = checkpoint.config
    where = "local directory" if Path(checkpoint.source).expanduser().is_dir() else f"hub ({checkpoint.directory})"
    gate = config.d_model * beta_rank + beta_rank * config.ssm_dim + config.ssm_dim + config.nheads
    base = _parameter_count(config)
    return [
        "Plan",
        f"  source      {checkpoint.source} ({checkpoint.format} format, {where}, "
        f"{checkpoint.weight_bytes / 1e6:,.1f} MB in {len(checkpoint.weight_files)} file(s))",
        f"  model       {describe_dimensions(config)}",
        f"  upgrade     layers {', '.join(map(str, chosen))} ({len(chosen)} of {config.n_layer}, "
        f"{'strategy ' + strategy if strategy else 'as listed'})",
        f"  new params  {gate * len(chosen):,} ({gate * len(chosen) / base:.3%} of {base:,}): beta gate rank "
        f"{beta_rank}, per-head gain",
        f"  beta        gain {beta_init:g} at init (importance per unit of forgetting, log-parameterised), "
        "importance prior 1, scale 1",
        f"  dtype       {dtype_name(target)}" + (" (from the checkpoint)" if target == stored else
                                                    f" (converted from {dtype_name(stored)})"),
        "  verify      " + (f"probe {probe_batch} x {probe_length} tokens against the base model" if verify
                             else "skipped (--skip-verify)"),
        f"  output      {output if output is not None else '(none: in memory)'}"
        + (f" (safetensors shards up to {max_shard / 1e9:g} GB)" if output is not None else ""),
        f"  tokenizer   {', '.join(p.name for p in checkpoint.tokenizer_files) or 'none in the source'}",
    ]


def _parameter_count(config: PalimpsaConfig) -> int:
    with torch.device("meta"):
        model = PalimpsaForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def build_report(checkpoint: Checkpoint, model: PalimpsaForCausalLM, chosen, strategy, layer_request, stored,
                 target, new_parameters, verification) -> dict:
    config = model.config
    total = sum(p.numel() for p in model.parameters())
    return {
        **report_header(),
        "source": checkpoint.source,
        "revision": checkpoint.revision,
        "format": checkpoint.format,
        "dimensions": describe_dimensions(config),
        "upgraded_layers": chosen,
        "layer_request": layer_request if isinstance(layer_request, (int, str)) else list(layer_request),
        "strategy": strategy,
        "dtype": dtype_name(target),
        "source_dtype": dtype_name(stored),
        "beta": {"form": config.beta_form, "init": config.beta_init, "rank": config.beta_rank,
                 "scale": config.beta_scale, "importance_prior": config.importance_prior},
        "parameters": {"base": total - new_parameters, "new": new_parameters, "total": total},
        "verification": verification,
        "tokenizer_files": [p.name for p in checkpoint.tokenizer_files],
    }


def model_card(report: dict, repo_id: str | None = None, license: dict | None = None) -> str:
    """The upgraded model's card: the hub's metadata, the base model by its hub id or directory name, the layers
    and beta settings, the equivalence figures, and a snippet loading it from ``repo_id`` (a placeholder
    without one). ``license``: the fields the source's card states."""
    verification = report["verification"]
    if verification.get("skipped"):
        figures = "Verification was skipped at upgrade time (`--skip-verify`); run `verify-equivalence` on it."
    else:
        zero, init = verification["at_zero"], verification["at_init"]
        probe = verification["probe"]
        figures = "\n".join([
            f"Measured at upgrade time on a seeded probe of {probe['batch']} x {probe['length']} random tokens, "
            "against the base model run by the same code:",
            "",
            "| beta scale | max abs logit diff | relative | mean KL (nats) | top-1 agreement |",
            "|---|---|---|---|---|",
            f"| 0 (exact Mamba2 limit) | {zero['max_abs_diff']:.3g} | {zero['relative_diff']:.3g} | "
            f"{zero['mean_kl']:.3g} | {zero['top1_agreement']:.2%} |",
            f"| 1 (as saved) | {init['max_abs_diff']:.3g} | {init['relative_diff']:.3g} | {init['mean_kl']:.3g} | "
            f"{init['top1_agreement']:.2%} |",
        ])
    beta = report["beta"]
    tokenizer = ("the tokenizer files are included" if report["tokenizer_files"] else
                 "the source carried no tokenizer files: use the base model's tokenizer")
    name = display_name(report["source"])
    revision = f" (revision {report['revision']})" if report["revision"] else ""
    use = "\n".join(usage(repo_id, "palimpsa", bool(report["tokenizer_files"])))
    return front_matter(base_model=report["source"], license=license or {}, library_name="transformers") + f"""
# Palimpsa upgrade of {name}

This model is {name}{revision} ({report['format']} format) with layers
{', '.join(map(str, report['upgraded_layers']))} turned into Palimpsa layers by palimpsa {report['palimpsa_version']}.
A Palimpsa layer keeps every Mamba2 weight and adds a per-element importance state whose gain beta starts small,
so the model starts out computing what the base model computed; fine-tuning grows beta where it helps.

- Base model: {name}{revision}
- Dimensions: {report['dimensions']}
- Upgraded layers: {report['upgraded_layers']} (request `{report['layer_request']}`, strategy {report['strategy']})
- New parameters: {report['parameters']['new']:,} of {report['parameters']['total']:,}
- Beta at init: per-head gain {beta['init']:g}, gate rank {beta['rank']}, scale {beta['scale']:g},
  importance prior {beta['importance_prior']:g}
- Weights: {report['dtype']} safetensors; {tokenizer}

## Equivalence with the base model

{figures}

{use}"""
