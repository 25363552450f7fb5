"""The one loader of a model for use: a Palimpsa model directory (``from_pretrained``, which checks the directory's
manifest and every weight) or a Mamba2 checkpoint in either format found in the wild (the checkpoint reader, which
checks them as it reads), and the tokenizer stored with it. Evaluation, generation, training, export and the
command lines load through here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..errors import PalimpsaError
from ..model.modeling import PalimpsaForCausalLM, model_from_state_dict
from .checkpoint import load_checkpoint


def is_palimpsa_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a local model directory whose ``config.json`` says ``model_type: palimpsa``."""
    config_path = Path(path).expanduser() / "config.json"
    if not config_path.is_file():
        return False
    try:
        raw = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(raw, dict) and raw.get("model_type") == "palimpsa"


def resolve_device(name: str, option: str = "--device") -> str:
    """``auto`` -> ``cuda`` when there is a GPU, else ``cpu``; a named device must exist on this machine."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise PalimpsaError(f"{option} {name!r} is not a device; give cpu, cuda, cuda:N or auto") from None
    if device.type not in ("cpu", "cuda"):
        raise PalimpsaError(f"{option} {name!r}: only cpu and cuda devices are supported")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise PalimpsaError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA device(s); give "
                            "cpu or auto")
    return str(device)


def load_palimpsa(directory: str | os.PathLike, dtype: torch.dtype | None = None) -> PalimpsaForCausalLM:
    """A Palimpsa model directory, in ``dtype`` (None: as stored), in eval mode."""
    try:
        return PalimpsaForCausalLM.from_pretrained(str(directory), dtype=dtype or "auto").eval()
    except (OSError, ValueError) as error:
        raise PalimpsaError(f"cannot load {directory}: {str(error).splitlines()[0]}") from None


def load_mamba2(source: str | os.PathLike, dtype: torch.dtype | None = None) -> tuple[PalimpsaForCausalLM, Path]:
    """A Mamba2 checkpoint in either format (no layer upgraded), in ``dtype`` (None: as stored), in eval mode; and
    the local directory it lies in (the hub snapshot for a hub id)."""
    checkpoint = load_checkpoint(source)
    state = checkpoint.load_state_dict(dtype, progress=False)
    model = model_from_state_dict(checkpoint.config, state, str(source)).eval()
    # where the weights came from, as from_pretrained records it (a local directory by its absolute path): peft
    # writes it into an adapter's base_model_name_or_path, from which AutoPeftModelForCausalLM loads the base
    model.name_or_path = model.config.name_or_path = checkpoint.config.base_model
    return model, checkpoint.directory


def load_model(source: str | os.PathLike, dtype: torch.dtype | None = None) -> tuple[PalimpsaForCausalLM, Path]:
    """A Palimpsa model directory, else any Mamba2 checkpoint; and the directory its tokenizer lies in."""
    path = Path(source).expanduser()
    if is_palimpsa_directory(path):
        return load_palimpsa(path, dtype), path
    return load_mamba2(source, dtype)


def load_tokenizer(directory: str | os.PathLike, source: str | os.PathLike, required: bool = True):
    """The tokenizer stored in ``directory`` (the one ``source`` was found in); None when there is none and it is
    not ``required``."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, TypeError):
        if required:
            raise PalimpsaError(f"{source} has no tokenizer files; copy the base model's tokenizer into it") from None
        return None


def load_model_and_tokenizer(source: str | os.PathLike, need_tokenizer: bool = True,
                             dtype: torch.dtype | None = None):
    """:func:`load_model` and :func:`load_tokenizer`: the model and its tokenizer (None when not needed and absent)."""
    model, directory = load_model(source, dtype)
    return model, load_tokenizer(directory, source, required=need_tokenizer)
