"""Checksums of a model directory's files, written at export/upgrade time and checked before loading."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .errors import PalimpsaError

REPORT_FILES = ("export_report.json", "upgrade_report.json")
SKIP_CHECKSUMS_ENV = "PALIMPSA_SKIP_CHECKSUMS"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            digest.update(block)
    return digest.hexdigest()


def file_manifest(directory: Path, names: list[str]) -> dict[str, dict]:
    return {name: {"bytes": (directory / name).stat().st_size, "sha256": sha256_of(directory / name)}
            for name in names}


def check_model_directory(directory: str | Path) -> None:
    """Compare a model directory's weight files with the checksums in its report, before loading.

    Raises PalimpsaError naming a missing, truncated or corrupted file. A directory without a report (or with
    ``PALIMPSA_SKIP_CHECKSUMS=1``) is not checked.
    """
    directory = Path(directory)
    if os.environ.get(SKIP_CHECKSUMS_ENV) == "1" or not directory.is_dir():
        return
    report = next((directory / name for name in REPORT_FILES if (directory / name).is_file()), None)
    if report is None:
        return
    try:
        files = json.loads(report.read_text()).get("files", {})
    except (json.JSONDecodeError, AttributeError):
        raise PalimpsaError(f"{report} is not valid JSON; restore it or delete it to load unchecked") from None
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            raise PalimpsaError(f"{directory}: {name} is missing (listed in {report.name}); copy it back or "
                                "export the model again")
        if path.stat().st_size != expected["bytes"]:
            raise PalimpsaError(f"{directory}: {name} has {path.stat().st_size} bytes, {report.name} says "
                                f"{expected['bytes']}; the file is truncated or corrupted, copy it again")
        if sha256_of(path) != expected["sha256"]:
            raise PalimpsaError(f"{directory}: {name} does not match its sha256 in {report.name}; the file is "
                                f"corrupted, copy it again (or set {SKIP_CHECKSUMS_ENV}=1 to load it anyway)")
