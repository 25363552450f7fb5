"""Export: a model directory, a LoRA adapter or a training run -> a self-describing model directory.

Outputs either a Palimpsa model (sharded safetensors, config.json, the modeling code for
``trust_remote_code=True``, generation_config.json, tokenizer, model card, export_report.json with sha256
checksums) or a plain Mamba2 with the beta parameters dropped and the measured difference stated: in mamba_ssm's
format (``to_mamba2``) or in transformers' ``Mamba2ForCausalLM`` format (``to_hf_mamba2``). Those two also take a
plain Mamba2 checkpoint as their source, converting between the formats.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..convert.checkpoint import (
    load_checkpoint,
    mamba_ssm_config,
    tokenizer_files_in,
    transformers_mamba2_config,
    transformers_mamba2_refusal,
)
from ..convert.compare import compare_logits, probe_input_ids, probe_logits
from ..convert.loading import load_mamba2, load_palimpsa
from ..errors import PalimpsaError
from ..io.dtypes import dtype_name, parse_dtype
from ..io.hub import hub_repository, push_directory
from ..io.model_card import license_of, missing_metadata, release_card
from ..io.model_directory import finish_model_directory, generation_config_for, report_header, write_model_directory
from ..io.output import atomic_directory, check_output_directory, write_json_atomic
from ..io.shards import parse_size, save_state_dict_sharded
from ..model.configuration import PalimpsaConfig
from ..model.modeling import PalimpsaForCausalLM
from ..train import layout as run_layout


def resolve_export_source(source: str | Path, plain_mamba2: bool = False) -> tuple[Path, str]:
    """Find what to export: ``(directory, kind)`` with kind ``model``, ``adapter`` or ``mamba2``.

    ``source`` is a model directory (``config.json`` with ``model_type: palimpsa``), a LoRA adapter directory
    (``adapter_config.json``), or a training run: its ``final/`` directory, else its newest
    ``checkpoints/step-*/model``. With ``plain_mamba2`` (a conversion to a Mamba2 format) it may also be a plain
    Mamba2 checkpoint directory of either format.
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
            if plain_mamba2:
                return path, "mamba2"  # the Mamba2 loader names what it cannot read
            kind = f"a {model_type!r} model" if model_type else "a checkpoint without model_type (mamba_ssm format?)"
            raise PalimpsaError(f"{source} holds {kind}, not a Palimpsa model; upgrade it first with upgrade-model "
                                "(--to-mamba2 and --to-hf-mamba2 convert a plain Mamba2)")
        return path, "model"
    model = run_layout.run_model(path)
    if model is not None:
        return resolve_export_source(model, plain_mamba2)
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
    if kind == "mamba2":
        return load_mamba2(directory, dtype)[0]
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
    return load_palimpsa(directory, dtype)


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
    found = tokenizer_files_in(directory)
    if not found and kind == "adapter":
        base = _read_json(directory / "adapter_config.json").get("base_model_name_or_path", "")
        found = tokenizer_files_in(Path(base))
    return found


def _run_summaries(directory: Path) -> tuple[str | None, str | None, dict | None]:
    """The name, recipe (YAML text) and latest evaluation of the training run the model directory belongs to, when
    it belongs to one (None for what it lacks)."""
    run = run_layout.run_of(directory)
    if run is None:
        return None, None, None
    recipe, evaluation = run / run_layout.RECIPE, run / run_layout.EVAL_SUMMARY
    return (run.resolve().name, recipe.read_text() if recipe.is_file() else None,
            _read_json(evaluation) if evaluation.is_file() else None)


FORMATS = {"palimpsa": "Palimpsa safetensors with its modeling code",
           "mamba_ssm": "mamba_ssm Mamba2, beta dropped",
           "transformers": "transformers Mamba2ForCausalLM, beta dropped"}
DROPPED = {"mamba_ssm": "to_mamba2", "transformers": "to_hf_mamba2"}  # the report's entry: what dropping beta cost
_SOURCE_KINDS = {"model": "model directory", "adapter": "LoRA adapter, merged", "mamba2": "plain Mamba2 checkpoint"}


def _source_config(directory: Path, kind: str) -> PalimpsaConfig:
    """The config of what ``directory`` holds, read without its weights (for refusals before any work)."""
    if kind == "mamba2":
        return load_checkpoint(directory).config
    if kind == "adapter":
        base = _read_json(directory / "adapter_config.json").get("base_model_name_or_path")
        if not base:
            raise PalimpsaError(f"{directory}/adapter_config.json names no base_model_name_or_path")
        return _source_config(*resolve_export_source(base))
    try:
        return PalimpsaConfig.from_pretrained(str(directory))
    except (OSError, ValueError) as error:
        raise PalimpsaError(f"cannot load {directory}: {str(error).splitlines()[0]}") from None


def export_model(
    source: str | Path,
    output: str | Path,
    *,
    merge_lora: bool = False,
    dtype: str | torch.dtype | None = None,
    shard_size: str | int = "5GB",
    standalone: bool = False,
    to_mamba2: bool = False,
    to_hf_mamba2: bool = False,
    hub_id: str | None = None,
    push_to_hub: str | None = None,
    private: bool = False,
    force: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Export ``source`` to ``output`` and return the export report (also written as export_report.json).

    Every Palimpsa export carries the modeling code for ``trust_remote_code=True``; ``standalone`` is kept for the
    callers that ask for it by name. ``to_mamba2`` and ``to_hf_mamba2`` write a plain Mamba2 instead (mamba_ssm's
    format, transformers'), the beta parameters dropped, read back and the difference measured.

    The model card's snippet loads the model from the hub repository ``hub_id`` (a placeholder without one);
    ``push_to_hub`` names the repository to create (``private``) and upload the finished directory to.
    """
    say = log or (lambda _line: None)
    started = time.perf_counter()
    output = Path(output).expanduser()
    target_dtype = parse_dtype(dtype)
    max_shard = parse_size(shard_size) if isinstance(shard_size, str) else int(shard_size)
    if to_mamba2 and to_hf_mamba2:
        raise PalimpsaError("--to-mamba2 and --to-hf-mamba2 exclude each other: choose mamba_ssm's format or "
                            "transformers'")
    if standalone and (to_mamba2 or to_hf_mamba2):
        option = "--to-mamba2" if to_mamba2 else "--to-hf-mamba2"
        raise PalimpsaError(f"--standalone and {option} exclude each other: a plain Mamba2 checkpoint needs no code")
    target = "mamba_ssm" if to_mamba2 else "transformers" if to_hf_mamba2 else "palimpsa"
    repo_id = hub_repository(hub_id, push_to_hub, private)
    directory, kind = resolve_export_source(source, plain_mamba2=target != "palimpsa")
    check_output_directory(output, force, sources=_export_sources(source, directory, kind))
    if target == "transformers" and (reason := transformers_mamba2_refusal(_source_config(directory, kind))):
        raise PalimpsaError(f"{directory} cannot be written in transformers' Mamba2 format: {reason}; --to-mamba2 "
                            "writes mamba_ssm's format, which has it")
    pushed = f"\n  hub         {push_to_hub}{' (private)' if private else ''}, pushed once written"
    say(f"Plan\n  source      {directory} ({_SOURCE_KINDS[kind]})\n  output      {output} ({FORMATS[target]})"
        + (pushed if push_to_hub else ""))
    model = load_export_source(directory, kind, merge_lora, target_dtype).eval()
    config = model.config
    run, recipe, evaluation = _run_summaries(directory)
    report = {
        **report_header(),
        "source": str(directory),
        "source_kind": kind,
        "run": run,
        "format": target,
        "dtype": dtype_name(next(model.parameters()).dtype),
        "upgraded_layers": list(config.upgraded_layers),
        "beta": {"form": config.beta_form, "init": config.beta_init, "rank": config.beta_rank,
                 "scale": config.beta_scale, "importance_prior": config.importance_prior},
        "base_model": config.base_model,
        "standalone": target == "palimpsa",
        "evaluation": evaluation,
    }
    tokenizer_files = _tokenizer_files(directory, kind)
    license = license_of(directory, config.base_model)

    def card(finished: dict) -> str:
        return release_card(finished, recipe, repo_id, license, tokenizer=bool(tokenizer_files))

    with atomic_directory(output, force) as staging:
        if target == "palimpsa":
            write_model_directory(staging, config, model.state_dict(), report_name="export_report.json",
                                  report=report, tokenizer=tokenizer_files, card=card, generation_config=True,
                                  max_shard_size=max_shard, progress=progress)
        else:
            write = _write_mamba2 if target == "mamba_ssm" else _write_hf_mamba2
            names, report[DROPPED[target]] = write(model, staging, max_shard, progress)
            finish_model_directory(staging, names, report_name="export_report.json", report=report,
                                   tokenizer=tokenizer_files, card=card)
    report["seconds"] = round(time.perf_counter() - started, 2)  # known only now: rewrite the one small file
    write_json_atomic(output / "export_report.json", report)
    say(f"done in {report['seconds']:.1f} s: {output}")
    if target != "palimpsa":
        diff = report[DROPPED[target]]
        what = "dropping beta changes the logits" if config.upgraded_layers else "read back, the logits differ"
        say(f"  {what} by max {diff['max_abs_diff']:.3g} (mean KL {diff['mean_kl']:.3g} nats, top-1 agreement "
            f"{diff['top1_agreement']:.1%}) on a {diff['probe']} probe")
    for note in missing_metadata(repo_id, license):
        say(note)
    if push_to_hub is not None:
        push_directory(output, push_to_hub, private=private, what="export", log=say)
    return report


def _beta_dropped(model: PalimpsaForCausalLM, written: torch.nn.Module) -> dict:
    """What dropping beta costs: the model against the checkpoint written and read back, on a seeded probe."""
    config = model.config
    probe = probe_input_ids(config.base_vocab_size or config.vocab_size, 2, 64, seed=0)
    comparison = compare_logits(probe_logits(model, probe), probe_logits(written, probe)).as_dict()
    comparison["probe"] = "2 x 64 random tokens"
    return comparison


def _without_beta(model: PalimpsaForCausalLM) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in model.state_dict().items() if ".beta_" not in name}


def _write_mamba2(model: PalimpsaForCausalLM, directory: Path, max_shard: int, progress: bool) -> tuple[list, dict]:
    """mamba_ssm format: ``config.json`` as ``MambaConfig`` writes it and ``pytorch_model.bin`` (one file: mamba_ssm
    reads no shards) without beta; returns the names written and what dropping beta costs, measured on the
    checkpoint read back as a user would."""
    config = model.config
    state = _without_beta(model)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["backbone.embedding.weight"]
    (directory / "config.json").write_text(json.dumps(mamba_ssm_config(config), indent=2) + "\n")
    torch.save({name: tensor.detach().contiguous() for name, tensor in state.items()},
               directory / "pytorch_model.bin")
    return ["config.json", "pytorch_model.bin"], _beta_dropped(model, load_mamba2(directory)[0])


def _write_hf_mamba2(model: PalimpsaForCausalLM, directory: Path, max_shard: int,
                     progress: bool) -> tuple[list, dict]:
    """transformers' ``Mamba2ForCausalLM`` format: its ``config.json`` (``model_type: mamba2``), safetensors under
    its key names (``backbone.embeddings``; a tied head left out, as transformers saves it) and a generation
    config; returns the names written and what dropping beta costs, measured on the checkpoint read back by
    ``Mamba2ForCausalLM.from_pretrained``."""
    from transformers import Mamba2ForCausalLM

    config = model.config
    state = {name.replace("backbone.embedding.", "backbone.embeddings."): tensor
             for name, tensor in _without_beta(model).items()
             if not (config.tie_word_embeddings and name == "lm_head.weight")}
    names = save_state_dict_sharded(state, directory, max_shard, progress=progress)
    hf_config = transformers_mamba2_config(config)
    hf_config.dtype = next(iter(state.values())).dtype
    hf_config.save_pretrained(directory)
    generation_config_for(config).save_pretrained(directory)
    written = Mamba2ForCausalLM.from_pretrained(str(directory), dtype="auto").eval()
    return names + ["config.json", "generation_config.json"], _beta_dropped(model, written)
