"""Outputs written whole or not at all: output checks before any work, atomic text and JSON files, atomic output
directories.

An output directory is written into a hidden staging sibling ``.OUT.partial-PID`` that is renamed into place at the
end. A failed or interrupted run (an exception, Ctrl-C, SIGTERM) removes it on the way out; only SIGKILL, which
cannot be caught, leaves it behind, and the next run writing the same output removes it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import PalimpsaError


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and a rename: readers see the old or the new file."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def write_json_atomic(path: Path, payload) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def check_writable(directory: Path, what: str) -> None:
    """Refuse, before any work, a directory that cannot be written into: it or one of its parents is a file, or the
    nearest one that exists is not writable by this user (the missing ones are made when writing)."""
    existing = next(path for path in (directory, *directory.parents) if path.exists())
    if not existing.is_dir():
        raise PalimpsaError(f"cannot write {what}: {existing} is a file, not a directory; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PalimpsaError(f"cannot write {what}: {existing} is not writable by this user; choose another path or "
                            "change its permissions")


def check_output_directory(output: Path, force: bool, sources: list[Path] = ()) -> None:
    """Before any work, refuse an output that is a file, a non-empty directory (unless ``force``), a path that cannot
    be written (see :func:`check_writable`; the staging directory is made next to it), or one that is, lies inside
    or contains one of ``sources``: replacing it would destroy what is being read."""
    if output.exists() and not output.is_dir():
        raise PalimpsaError(f"output {output} is a file; give a directory path")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise PalimpsaError(f"output directory {output} is not empty; choose another or pass --force to replace it")
    check_writable(output.parent, f"output {output}")
    target = output.resolve()
    for source in sources:
        source = Path(source).expanduser().resolve()
        relation = ("is" if target == source else "lies inside" if source in target.parents else
                    "contains" if target in source.parents else None)
        if relation:
            raise PalimpsaError(f"output {output} {relation} the source {source}; writing it would destroy the "
                                "source, so choose an output outside it")


def _staging_name(output: Path, kind: str, pid: int) -> Path:
    return output.parent / f".{output.name}.{kind}-{pid}"


def remove_stale_staging(output: Path) -> None:
    """Clean up what killed runs left next to ``output`` (SIGKILL cannot be caught): ``.OUT.partial-PID`` staging
    directories are removed, and a ``.OUT.old-PID`` (an output being replaced) goes back into place when ``output``
    itself is missing, else is removed. Those of a process still alive (a run writing the same output now) stay."""
    pattern = re.compile(rf"\.{re.escape(output.name)}\.(partial|old)-(\d+)")
    for path in sorted(output.parent.glob(f".{glob.escape(output.name)}.*-*")):
        match = pattern.fullmatch(path.name)
        if not match or _process_alive(int(match.group(2))):
            continue
        if match.group(1) == "old" and not output.exists():
            path.rename(output)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():  # a directory of an earlier process that had this PID: this one has made none yet
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


@contextlib.contextmanager
def atomic_directory(output: Path, force: bool) -> Iterator[Path]:
    """Yield a staging directory next to ``output``; on success it replaces ``output``, on any exit by an exception
    (Ctrl-C and SIGTERM included) it is removed. Stale ones of killed runs are removed first."""
    remove_stale_staging(output)  # first: a replaced output that a killed run had moved aside is back in place
    check_output_directory(output, force)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging_name(output, "partial", os.getpid())
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        if output.exists():
            retired = _staging_name(output, "old", os.getpid())
            output.rename(retired)
            staging.rename(output)
            shutil.rmtree(retired)
        else:
            staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
