"""What is checked before a model is used: the checksums of a directory's weight files (listed at export/upgrade
time with every other file, checked before loading) and every weight tensor as it is read (floating point,
finite).

A report lists every file of its directory, but loading checks the weights only: config.json, the tokenizer, the
card and the code are read and validated when used, and editing them (a ``beta_scale``, a chat template) is a
user's right, not corruption. ``save_pretrained`` rewrites the list (:func:`refresh_manifest`), so a model saved
again over its own directory stays true to its report.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from ..errors import PalimpsaError

REPORT_FILES = ("export_report.json", "upgrade_report.json")
SKIP_CHECKSUMS_ENV = "PALIMPSA_SKIP_CHECKSUMS"
# what loading checks: the weight files and their shard indexes (a corrupt index would point weights elsewhere)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".index.json")
UNLISTED = ("README.md",)  # the card is written from the finished report, so the report cannot list it


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            digest.update(block)
    return digest.hexdigest()


def file_manifest(directory: Path, names: list[str]) -> dict[str, dict]:
    return {name: {"bytes": (directory / name).stat().st_size, "sha256": sha256_of(directory / name)}
            for name in names}


def report_of(directory: Path) -> Path | None:
    """The report (``REPORT_FILES``) a model directory carries, or None."""
    return next((directory / name for name in REPORT_FILES if (directory / name).is_file()), None)


def _read_report(report: Path) -> dict:
    try:
        payload = json.loads(report.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        payload = None
    if not isinstance(payload, dict):
        raise PalimpsaError(f"{report} is not valid JSON; restore it or delete it to load unchecked")
    return payload


def is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES)


def check_model_directory(directory: str | Path) -> None:
    """Compare a model directory's weight files with the checksums in its report, before loading.

    Raises PalimpsaError naming a missing, truncated or corrupted weight file (or shard index). The other files
    the report lists are not compared: see the module's docstring. A directory without a report (or with
    ``PALIMPSA_SKIP_CHECKSUMS=1``) is not checked.
    """
    directory = Path(directory)
    if os.environ.get(SKIP_CHECKSUMS_ENV) == "1" or not directory.is_dir():
        return
    report = report_of(directory)
    if report is None:
        return
    files = _read_report(report).get("files", {})
    if isinstance(files, dict):
        files = {name: entry for name, entry in files.items() if is_weight_file(name)}
    check_files(directory, files, report.name)


def refresh_manifest(directory: str | Path) -> None:
    """Make the report of ``directory`` (if it has one) list the files it holds now, with their sizes and sha256:
    after ``save_pretrained`` wrote new weights or a new config into it. Every regular file is listed but the
    reports, the card and hidden files; the report's other fields are kept."""
    directory = Path(directory)
    report = report_of(directory)
    if report is None:
        return
    payload = _read_report(report)
    names = sorted(path.name for path in directory.iterdir() if path.is_file() and not path.name.startswith(".")
                   and path.name not in REPORT_FILES + UNLISTED)
    payload["files"] = file_manifest(directory, names)
    temporary = report.with_name(report.name + ".tmp")  # readers see the old report or the new one
    temporary.write_text(json.dumps(payload, indent=2) + "\n")
    temporary.replace(report)


def check_files(directory: Path, files: dict, listed_in: str) -> None:
    """Each of ``files`` (a manifest: name relative to ``directory`` -> ``{"bytes", "sha256"}``, as
    :func:`file_manifest` writes it) is there with its size and checksum; else PalimpsaError naming the file.
    Nothing is checked with ``PALIMPSA_SKIP_CHECKSUMS=1``."""
    if os.environ.get(SKIP_CHECKSUMS_ENV) == "1":
        return
    if not isinstance(files, dict) or not all(isinstance(entry, dict) and {"bytes", "sha256"} <= set(entry)
                                              for entry in files.values()):
        raise PalimpsaError(f"{directory}/{listed_in}: its file list is not a manifest of bytes and sha256; restore "
                            "it or delete it to load unchecked")
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            raise PalimpsaError(f"{directory}: {name} is missing (listed in {listed_in}); copy it back or "
                                "export the model again")
        if path.stat().st_size != expected["bytes"]:
            raise PalimpsaError(f"{directory}: {name} has {path.stat().st_size} bytes, {listed_in} says "
                                f"{expected['bytes']}; the file is truncated or corrupted, copy it again")
        if sha256_of(path) != expected["sha256"]:
            raise PalimpsaError(f"{directory}: {name} does not match its sha256 in {listed_in}; the file is "
                                f"corrupted, copy it again (or set {SKIP_CHECKSUMS_ENV}=1 to load it anyway)")


def check_weight(name: str, tensor: torch.Tensor, where: str) -> None:
    """Refuse a weight that is not floating point, or that holds NaN or an infinity, naming it: such a model runs
    without failing and computes garbage (NaN logits pass no comparison, so they would pass verification too).

    One pass over the tensor as it is read; meta tensors (nothing loaded) are skipped.
    """
    if tensor.is_meta:
        return
    if not tensor.is_floating_point():
        raise PalimpsaError(f"{where}: weight {name} is stored as {str(tensor.dtype).removeprefix('torch.')}; model "
                            "weights must be floating point (float32, bfloat16, float16): re-export the checkpoint")
    if not torch.isfinite(tensor).all():
        count = (~torch.isfinite(tensor)).sum().item()
        raise PalimpsaError(f"{where}: weight {name} holds {count} NaN or infinite value(s); the checkpoint is "
                            "corrupt or its training diverged: use an earlier or a re-downloaded checkpoint")
