"""scripts/check_fsdp.py's own machinery on the CPU: killing one rank of a launch once its first checkpoint is
complete, and its refusals. (The whole flow, ``--cpu``, runs four multi-process fine-tunes: about 6 minutes on two
cores, run by hand; the data-parallel equality itself is tests/train/test_training.py's.)"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import time

import pytest
from checkpoints import ROOT


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_fsdp", ROOT / "scripts" / "check_fsdp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_rank_is_killed_once_the_first_checkpoint_is_complete(check, tmp_path):
    """A stand-in launcher starts a "rank" (a process with RANK in its environment) that writes a checkpoint after
    a second and then would run for a minute: the rank is killed, not the launcher, and the launcher's failure
    comes back at once. A checkpoint still being written (``.partial``) does not count."""
    rank = tmp_path / "rank.py"
    rank.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        time.sleep(1.0)
        partial = pathlib.Path({str(tmp_path / "run")!r}) / "checkpoints" / "step-0000001.partial"
        partial.mkdir(parents=True)
        (partial / "trainer_state.json").write_text("{{}}")
        time.sleep(1.0)
        partial.rename(partial.with_name("step-0000001"))
        time.sleep(60)
    """))
    launcher = tmp_path / "launcher.py"
    launcher.write_text(textwrap.dedent(f"""
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, {str(rank)!r}], env={{**os.environ, "RANK": "1"}})
        sys.exit(1 if child.wait() else 0)
    """))
    started = time.monotonic()
    code, killed = check.run_and_kill_a_rank([sys.executable, str(launcher)], tmp_path / "log", tmp_path / "run",
                                             timeout=30)
    assert killed and code == 1 and 2.0 <= time.monotonic() - started < 20  # after the rename, not before
    assert (tmp_path / "run" / "checkpoints" / "step-0000001" / "trainer_state.json").is_file()


def test_refusals_name_the_problem(check, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit):
        check.main([str(tmp_path / "a"), "--processes", "1", "--cpu"])
    assert "--processes: give 2 or more" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("")
    with pytest.raises(SystemExit):
        check.main([str(tmp_path / "b"), "--cpu"])
    assert "is not empty; give a new folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check.main([str(tmp_path / "c")])  # no GPUs
    assert "GPU(s) here, 2 needed; --cpu checks the flow" in capsys.readouterr().err


def test_the_weights_tolerance_follows_the_measured_repeat(check):
    """Two runs of one recipe on a GPU differ by what a repeat measures (float atomics in the scan's backward, Adam's
    small epsilon on the gate): N processes and a resumed run may differ by ten times that, and by the float
    tolerance where a repeat is exact."""
    assert check.weights_limit(0.0, "weights") == check.TOLERANCE["weights"]
    assert check.weights_limit(None, "resumed") == check.TOLERANCE["resumed"]
    assert check.weights_limit(1.8e-3, "weights") == pytest.approx(check.NOISE_FACTOR * 1.8e-3)
    assert check.weights_limit(1e-7, "weights") == check.TOLERANCE["weights"]


def test_largest_difference_names_the_tensor(check):
    import torch

    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert check.largest_difference(a, b) == (0.0, None)
    with torch.no_grad():
        b.bias[1] += 0.25
    value, name = check.largest_difference(a, b)
    assert name == "bias" and value == pytest.approx(0.25)
    assert check.largest_difference(a, torch.nn.Linear(3, 2, bias=False)) == (None, None)
    with torch.no_grad():
        b.weight[0, 0] = float("nan")
    value, name = check.largest_difference(a, b)
    assert name == "weight" and not check.within(value, 1.0)
    assert not check.within(None, 1.0) and check.within(0.5, 1.0)
