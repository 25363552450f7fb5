"""Export: a model directory, a LoRA adapter or a training run -> a self-describing model directory.

Outputs either a Palimpsa model (sharded safetensors, config.json, generation_config.json, tokenizer, model card,
export_report.json with sha256 checksums; with ``standalone`` also the modeling code for
``trust_remote_code=True``) or, with ``to_mamba2``, a plain mamba_ssm-format Mamba2 with the beta parameters
dropped and the measured difference stated.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch

from .checkpoint import TOKENIZER_FILES
from .errors import PalimpsaError
from .integrity import check_model_directory, file_manifest
from .modeling import PalimpsaForCausalLM
from .saving import (
    atomic_directory,
    check_output_directory,
    copy_files,
    model_state_for_saving,
    parse_size,
    save_state_dict_sharded,
)
from .standalone import AUTO_MAP, write_standalone_code
from .verify import compare_logits, probe_input_ids, probe_logits


def resolve_export_source(source: str | Path) -> tuple[Path, str]:
    """Find what to export: ``(directory, kind)`` with kind ``model`` or ``adapter``.

    ``source`` is a model directory (``config.json`` with ``model_type: palimpsa``), a LoRA adapter directory
    (``adapter_config.json``), or a training run: its ``final/`` directory, else its newest
    ``checkpoints/step-*/model``.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise PalimpsaError(f"{source} does not exist; give a model directory, a LoRA adapter or a training run")
    if not path.is_dir():
        raise PalimpsaError(f"{source} is a file; give a directory")
    if (path / "adapter_config.json").is_file():
        return path, "adapter"
    if (path / "config.json").is_file():
        model_type = _read_json(path / "config.json").get("model_type")
        if model_type != "palimpsa":
            kind = f"a {model_type!r} model" if model_type else "a checkpoint without model_type (mamba_ssm format?)"
            raise PalimpsaError(f"{source} holds {kind}, not a Palimpsa model; upgrade it first with upgrade-model")
        return path, "model"
    if (path / "final").is_dir():
        return resolve_export_source(path / "final")
    steps = sorted(p for p in (path / "checkpoints").glob("step-*/model")  # complete checkpoints only
                   if not p.parent.name.endswith(".partial") and (p / "config.json").is_file())
    if steps:
        return resolve_export_source(steps[-1])
    raise PalimpsaError(f"{source} holds no model: expected config.json, adapter_config.json, final/ or "
                        "checkpoints/step-*/model")


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise PalimpsaError(f"{path} is not valid JSON") from None
    if not isinstance(value, dict):
        raise PalimpsaError(f"{path} does not hold a JSON object")
    return value


def load_export_source(directory: Path, kind: str, merge_lora: bool, dtype: torch.dtype | None):
    """Load the model to export; a LoRA adapter is merged into its base model (``merge_lora`` required)."""
    if kind == "adapter":
        if not merge_lora:
            raise PalimpsaError(f"{directory} is a LoRA adapter; pass --merge-lora to merge it into its base model")
        from peft import PeftModel

        adapter = _read_json(directory / "adapter_config.json")
        base_path = adapter.get("base_model_name_or_path")
        if not base_path:
            raise PalimpsaError(f"{directory}/adapter_config.json names no base_model_name_or_path")
        base_dir, base_kind = resolve_export_source(base_path)
        base = load_export_source(base_dir, base_kind, False, dtype)
        return PeftModel.from_pretrained(base, str(directory)).merge_and_unload()
    check_model_directory(directory)
    try:
        return PalimpsaForCausalLM.from_pretrained(str(directory), dtype=dtype or "auto")
    except (OSError, ValueError) as error:
        raise PalimpsaError(f"cannot load {directory}: {str(error).splitlines()[0]}") from None


def _export_sources(source: str | Path, directory: Path, kind: str) -> list[Path]:
    """What an export reads and so must not write over: the source as given (a training run), the model directory
    found in it, and an adapter's base model."""
    sources = [Path(source).expanduser(), directory]
    if kind == "adapter":
        base = _read_json(directory / "adapter_config.json").get("base_model_name_or_path")
        if base and Path(base).expanduser().exists():
            sources.append(Path(base).expanduser())
    return sources


def _tokenizer_files(directory: Path, kind: str) -> list[Path]:
    found = [directory / name for name in TOKENIZER_FILES if (directory / name).is_file()]
    if not found and kind == "adapter":
        base = _read_json(directory / "adapter_config.json").get("base_model_name_or_path", "")
        base_dir = Path(base)
        found = [base_dir / name for name in TOKENIZER_FILES if (base_dir / name).is_file()]
    return found


def _known_summaries(directory: Path) -> tuple[str | None, dict | None]:
    """The recipe (YAML text) and evaluation summary of the run the model came from, when present."""
    recipe = evaluation = None
    for folder in (directory, directory.parent, directory.parent.parent, directory.parent.parent.parent):
        if recipe is None and (folder / "recipe.yaml").is_file():
            recipe = (folder / "recipe.yaml").read_text()
        if evaluation is None and (folder / "eval_summary.json").is_file():
            evaluation = _read_json(folder / "eval_summary.json")
    return recipe, evaluation


def export_model(
    source: str | Path,
    output: str | Path,
    *,
    merge_lora: bool = False,
    dtype: str | torch.dtype | None = None,
    shard_size: str | int = "5GB",
    standalone: bool = False,
    to_mamba2: bool = False,
    force: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Export ``source`` to ``output`` and return the export report (also written as export_report.json)."""
    from .pipeline import parse_dtype

    say = log or (lambda _line: None)
    started = time.perf_counter()
    output = Path(output).expanduser()
    target_dtype = parse_dtype(dtype)
    max_shard = parse_size(shard_size) if isinstance(shard_size, str) else int(shard_size)
    if standalone and to_mamba2:
        raise PalimpsaError("--standalone and --to-mamba2 exclude each other: a mamba_ssm checkpoint needs no code")
    directory, kind = resolve_export_source(source)
    check_output_directory(output, force, sources=_export_sources(source, directory, kind))
    say(f"Plan\n  source      {directory} ({'LoRA adapter, merged' if kind == 'adapter' else 'model directory'})\n"
        f"  output      {output} ({'mamba_ssm Mamba2, beta dropped' if to_mamba2 else 'Palimpsa safetensors'}"
        f"{', standalone code' if standalone else ''})")
    model = load_export_source(directory, kind, merge_lora, target_dtype).eval()
    config = model.config
    recipe, evaluation = _known_summaries(directory)
    report = {
        "palimpsa_version": _version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": str(directory),
        "source_kind": kind,
        "format": "mamba_ssm" if to_mamba2 else "palimpsa",
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "upgraded_layers": list(config.upgraded_layers),
        "beta": {"form": config.beta_form, "init": config.beta_init, "rank": config.beta_rank,
                 "scale": config.beta_scale, "importance_prior": config.importance_prior},
        "base_model": config.base_model,
        "standalone": standalone,
        "evaluation": evaluation,
    }
    tokenizer_files = _tokenizer_files(directory, kind)
    with atomic_directory(output, force) as staging:
        if to_mamba2:
            names, report["to_mamba2"] = _write_mamba2(model, staging, config)
        else:
            names = save_state_dict_sharded(model_state_for_saving(model), staging, max_shard, progress=progress)
            config.architectures = [type(model).__name__]
            config.dtype = next(model.parameters()).dtype
            if standalone:
                names += write_standalone_code(staging)
                config.auto_map = dict(AUTO_MAP)
            config.save_pretrained(staging)
            names.append("config.json")
            _generation_config(config).save_pretrained(staging)
            names.append("generation_config.json")
        names += copy_files(tokenizer_files, staging)
        report["files"] = file_manifest(staging, names)
        report["seconds"] = round(time.perf_counter() - started, 2)
        (staging / "README.md").write_text(export_card(report, recipe))
        (staging / "export_report.json").write_text(json.dumps(report, indent=2) + "\n")
    say(f"done in {report['seconds']:.1f} s: {output}")
    if to_mamba2:
        diff = report["to_mamba2"]
        say(f"  dropping beta changes the logits by max {diff['max_abs_diff']:.3g} (mean KL {diff['mean_kl']:.3g} "
            f"nats, top-1 agreement {diff['top1_agreement']:.1%}) on a {diff['probe']} probe")
    return report


def _generation_config(config):
    from transformers import GenerationConfig

    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    return GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=pad)


def _write_mamba2(model: PalimpsaForCausalLM, directory: Path, config) -> tuple[list[str], dict]:
    """mamba_ssm format: ``config.json`` as ``MambaConfig`` writes it and ``pytorch_model.bin`` without beta."""
    from .checkpoint import load_checkpoint
    from .modeling import model_from_state_dict

    state = {name: tensor for name, tensor in model.state_dict().items() if ".beta_" not in name}
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["backbone.embedding.weight"]
    vocab = config.base_vocab_size or config.vocab_size
    ssm_cfg = {"layer": "Mamba2", "d_state": config.d_state, "d_conv": config.d_conv, "expand": config.expand,
               "headdim": config.headdim, "ngroups": config.ngroups, "D_has_hdim": config.D_has_hdim,
               "rmsnorm": config.rmsnorm, "norm_before_gate": config.norm_before_gate, "bias": config.bias,
               "conv_bias": config.conv_bias, "chunk_size": config.chunk_size}
    if config.d_ssm is not None:
        ssm_cfg["d_ssm"] = config.d_ssm
    if config.dt_limit is not None:
        ssm_cfg["dt_limit"] = list(config.dt_limit)
    raw = {"d_model": config.d_model, "d_intermediate": 0, "n_layer": config.n_layer, "vocab_size": vocab,
           "ssm_cfg": ssm_cfg, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": config.rms_norm,
           "residual_in_fp32": config.residual_in_fp32, "fused_add_norm": True,
           "pad_vocab_size_multiple": _padding_multiple(config.vocab_size, vocab),
           "tie_embeddings": config.tie_word_embeddings}
    (directory / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    torch.save({name: tensor.detach().contiguous() for name, tensor in state.items()},
               directory / "pytorch_model.bin")
    # Measure what dropping beta costs by reading the written checkpoint back, as a user would.
    written = load_checkpoint(directory)
    mamba2 = model_from_state_dict(written.config, written.load_state_dict(progress=False), str(directory)).eval()
    probe = probe_input_ids(vocab, 2, 64, seed=0)
    comparison = compare_logits(probe_logits(model, probe), probe_logits(mamba2, probe)).as_dict()
    comparison["probe"] = "2 x 64 random tokens"
    return ["config.json", "pytorch_model.bin"], comparison


def _padding_multiple(padded: int, vocab: int) -> int:
    """A ``pad_vocab_size_multiple`` that reproduces ``padded`` from ``vocab``."""
    for multiple in (16, 8, 32, 64, 128, 4, 2):
        if -(-vocab // multiple) * multiple == padded:
            return multiple
    return padded if padded != vocab else 1


def _version() -> str:
    from .pipeline import _package_version

    return _package_version()


def export_card(report: dict, recipe: str | None) -> str:
    lines = ["---", "library_name: transformers", "tags:", "- palimpsa", "- mamba2", "---", "",
             f"# {'Mamba2 (beta dropped) from' if report['format'] == 'mamba_ssm' else 'Palimpsa model'} "
             f"{report['base_model'] or ''}".rstrip(), "",
             f"- Exported from: `{report['source']}` ({report['source_kind']})",
             f"- Base model: `{report['base_model']}`",
             f"- Upgraded layers: {report['upgraded_layers']}",
             f"- Beta: gain init {report['beta']['init']:g}, rank {report['beta']['rank']}, "
             f"scale {report['beta']['scale']:g}",
             f"- Weights: {report['dtype']}, checksums in export_report.json", ""]
    if report["format"] == "mamba_ssm":
        diff = report["to_mamba2"]
        lines += ["This is a plain mamba_ssm-format Mamba2: the Palimpsa layers' beta parameters were dropped, which "
                  f"changes the logits by at most {diff['max_abs_diff']:.3g} (mean KL {diff['mean_kl']:.3g} nats, "
                  f"top-1 agreement {diff['top1_agreement']:.1%}) on a {diff['probe']} probe.", ""]
    else:
        load = ("AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)  # no palimpsa needed"
                if report["standalone"] else "import palimpsa.upgrade; AutoModelForCausalLM.from_pretrained(path)")
        lines += ["## Use", "", "```python", "from transformers import AutoModelForCausalLM", load, "```", ""]
    if report.get("evaluation"):
        lines += ["## Evaluation", "", "```json", json.dumps(report["evaluation"], indent=2), "```", ""]
    if recipe:
        lines += ["## Training recipe", "", "```yaml", recipe.rstrip(), "```", ""]
    return "\n".join(lines)
