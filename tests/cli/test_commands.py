"""The command lines as a user meets them: every console script answers ``--help`` and a wrong argument before torch
and transformers load."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # the console scripts installed with the Python that runs the tests
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
ENV.pop("TRITON_INTERPRET", None)
SCRIPTS = sorted(entry.name for entry in importlib.metadata.distribution("palimpsa").entry_points
                 if entry.group == "console_scripts")
HAS_LM_EVAL = importlib.util.find_spec("lm_eval") is not None


def script(name: str) -> str:
    return str(BIN / name) if (BIN / name).is_file() else name


def run(command: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env={**ENV, **env}, timeout=300)


def imported(stderr: str) -> set[str]:
    """The modules a run imported, read from Python's import profile (``PYTHONPROFILEIMPORTTIME=1``)."""
    return {match.group(1) for match in re.finditer(r"^import time:.*\|\s*([\w.]+)\s*$", stderr, re.MULTILINE)}


@pytest.mark.parametrize("name", [s for s in SCRIPTS if HAS_LM_EVAL or s != "palimpsa-lm-eval"])
def test_help_and_argument_errors_come_before_torch_and_transformers(name):
    """``--help`` and a mistake on the command line are answered without importing torch or transformers (4 s of
    imports before, a few tens of milliseconds now)."""
    for args, status in ((["--help"], 0), (["--no-such-option"], 2)):
        result = run([script(name), *args], PYTHONPROFILEIMPORTTIME="1")
        assert result.returncode == status, result.stderr[-2000:]
        modules = imported(result.stderr)
        assert "palimpsa.upgrade.cli.common" in modules  # the profile saw the command's own imports
        assert not {"torch", "transformers"} & modules, f"{name} {args[0]} imported them"
        assert "Traceback" not in result.stderr
    assert "usage:" in run([script(name), "--help"]).stdout
