"""The one writer of a model directory: what ``upgrade-model``, the trainer's checkpoints and ``export-model`` write.

A Palimpsa model directory holds its weights as safetensors (sharded with an index past ``max_shard_size``),
``config.json`` (with an ``auto_map``), the modeling code for ``trust_remote_code=True`` (:mod:`.remote_code`),
optionally ``generation_config.json``, the tokenizer, a model card (``README.md``) and a JSON report
(``upgrade_report.json`` or ``export_report.json``) whose ``files`` lists every other file's size and sha256;
``from_pretrained`` checks the weight files among them before it reads a weight.
:func:`finish_model_directory` is the part shared with directories of another weight format (``--to-mamba2``).

The writer fills a directory it is given; making that atomic (a staging directory renamed into place) is the
caller's part, since each caller stages differently.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from .manifest import file_manifest
from .output import write_json_atomic
from .remote_code import write_remote_code
from .shards import save_state_dict_sharded

DEFAULT_SHARD_SIZE = 5 * 10**9
ARCHITECTURE = "PalimpsaForCausalLM"


def package_version() -> str:
    try:
        return version("palimpsa")
    except PackageNotFoundError:
        return "unknown"


def report_header() -> dict:
    """The first fields of every report: which palimpsa wrote it, and when."""
    return {"palimpsa_version": package_version(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def state_for_saving(state: dict[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    """``state`` without a head tied to the embedding: it is the same tensor, re-tied at load."""
    if getattr(config, "tie_word_embeddings", False):
        return {name: tensor for name, tensor in state.items() if name != "lm_head.weight"}
    return state


def write_model_directory(directory: Path, config, state: dict[str, torch.Tensor], *, report_name: str,
                          report: dict, tokenizer=None, card: Callable[[dict], str] | None = None,
                          generation_config: bool = False, max_shard_size: int = DEFAULT_SHARD_SIZE,
                          progress: bool = False) -> list[str]:
    """Write a loadable Palimpsa model directory into the existing, empty ``directory``.

    Args:
        config: the model's ``PalimpsaConfig``; a copy is saved, with ``architectures``, the weights' dtype and
            the ``auto_map`` of the modeling code written beside it.
        state: the weights under the model's names (a tied head is left out here).
        report_name, report: the JSON report; its ``files`` entry (the manifest) is filled in here, in place.
        tokenizer: a tokenizer (saved with ``save_pretrained``), tokenizer files to copy, or None.
        card: makes the model card from the finished report; None writes none.
        generation_config: also write ``generation_config.json`` (bos/eos/pad from the config).
        max_shard_size: largest safetensors shard, in bytes.

    Returns:
        The names of the files written.
    """
    config = copy.deepcopy(config)
    config.architectures = [ARCHITECTURE]
    config.dtype = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    names = save_state_dict_sharded(state_for_saving(state, config), directory, max_shard_size, progress=progress)
    names += write_remote_code(directory, config)
    config.save_pretrained(directory)
    names.append("config.json")
    if generation_config:
        generation_config_for(config).save_pretrained(directory)
        names.append("generation_config.json")
    return finish_model_directory(directory, names, report_name=report_name, report=report, tokenizer=tokenizer,
                                  card=card)


def finish_model_directory(directory: Path, names: list[str], *, report_name: str, report: dict, tokenizer=None,
                           card: Callable[[dict], str] | None = None) -> list[str]:
    """After the weights and config (``names``): the tokenizer, the manifest of every file in ``report["files"]``,
    the card and the report. Returns every name written."""
    names = names + _write_tokenizer(tokenizer, directory)
    report["files"] = file_manifest(directory, names)
    if card is not None:
        (directory / "README.md").write_text(card(report))
        names.append("README.md")
    write_json_atomic(directory / report_name, report)
    return names + [report_name]


def _write_tokenizer(tokenizer, directory: Path) -> list[str]:
    if tokenizer is None:
        return []
    if hasattr(tokenizer, "save_pretrained"):
        return sorted({Path(path).name for path in tokenizer.save_pretrained(str(directory))
                       if Path(path).is_file()})
    files: Sequence[Path] = tokenizer
    for path in files:
        shutil.copy2(path, directory / path.name)
    return [path.name for path in files]


def generation_config_for(config):
    """transformers' ``GenerationConfig`` of a model: bos/eos from its config, pad falling back to eos."""
    from transformers import GenerationConfig

    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    return GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=pad)
