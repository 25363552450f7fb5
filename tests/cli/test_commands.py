"""The command lines as a user meets them: every console script answers ``--help`` and a wrong argument before torch
and transformers load, and ``palimpsa`` (or ``python -m palimpsa``) runs each of them under one name."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkpoints import EMBEDDED
from palimpsa.upgrade.cli.palimpsa import COMMANDS

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


def test_the_palimpsa_command_lists_every_script_once():
    """``palimpsa --help`` (and ``python -m palimpsa``): one line per command, one command per console script."""
    listing = run([script("palimpsa"), "--help"])
    assert listing.returncode == 0
    assert run([sys.executable, "-m", "palimpsa", "--help"]).stdout == listing.stdout
    lines = listing.stdout.split("commands:\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in lines] == list(COMMANDS)
    assert {script for _, script, _ in COMMANDS.values()} == set(SCRIPTS) - {"palimpsa"}
    for name in COMMANDS:  # a command's help is its script's, under the name typed
        help_text = run([script("palimpsa"), name, "--help"]).stdout if name != "lm-eval" else None
        if help_text is not None:
            assert help_text.startswith(f"usage: palimpsa {name} ")
    unknown = run([script("palimpsa"), "upgrad", "x"])
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "palimpsa: error: unknown command 'upgrad'; did you mean upgrade?"
    wrong = run([script("palimpsa"), "eval"])
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines()[-1] == ("palimpsa eval: error: the following arguments are required: "
                                                     "MODEL")


def test_a_command_under_palimpsa_does_what_its_script_does():
    """``palimpsa generate`` and ``generate-text`` print the same completions, one after another with a header
    naming each; a mistake is one line under the name typed."""
    args = [str(EMBEDDED), "-p", "def add(a, b):", "-p", "import os\n", "--max-new-tokens", "12"]
    commands = {"script": [script("generate-text"), *args], "palimpsa": [script("palimpsa"), "generate", *args],
                "missing": [sys.executable, "-m", "palimpsa", "generate", "no-such-model", "-p", "hi"]}
    with ThreadPoolExecutor(len(commands)) as pool:
        results = dict(zip(commands, pool.map(run, commands.values())))
    assert results["script"].returncode == 0, results["script"].stderr[-2000:]
    assert results["palimpsa"].stdout == results["script"].stdout
    blocks = re.split(r"^--- completion (\d) of 2 ---\n", results["script"].stdout, flags=re.MULTILINE)
    assert blocks[0] == "" and blocks[1::2] == ["1", "2"]
    assert blocks[2].startswith("def add(a, b):") and blocks[4].startswith("import os\n")
    missing = results["missing"]
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].startswith("palimpsa generate: error: ")


def test_eval_model_help_shows_the_defaults():
    text = run([script("eval-model"), "--help"], COLUMNS="200").stdout.split("options:\n")[1].split("\n\n")[0]
    entries = [" ".join(entry.split()) for entry in re.split(r"\n(?=  -)", text)]  # an option and its help
    for option, default in (("--tasks TASKS", "nll-position,passkey,niah,mqar"), ("--lengths LENGTHS", "256,512,1024"),
                            ("--samples SAMPLES", "2"), ("--segment-length SEGMENT_LENGTH", "512"),
                            ("--batch-size BATCH_SIZE", "4"), ("--seed SEED", "0"), ("--device DEVICE", "auto"),
                            ("--output DIR, -o DIR", "eval-results")):
        [entry] = [entry for entry in entries if entry.startswith(option + " ")]
        assert entry.endswith(f"(default: {default})"), entry
