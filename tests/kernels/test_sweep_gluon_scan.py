"""The GPU sweep's driver on the CPU: a variant that crashes its worker or hangs is recorded as failed and the
others still run (``scripts/sweep_gluon_scan.py``, with a stand-in worker that needs no GPU)."""

from __future__ import annotations

import importlib.util
import sys

from checkpoints import ROOT

FAKE_WORKER = '''
import json, os, sys, time
names, rows, progress = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
for name in names:
    with open(progress, "a") as f:
        f.write(json.dumps({"start": name, "time": time.time()}) + "\\n")
    if name == "crash":
        os._exit(3)
    if name == "hang":
        time.sleep(60)
    row = {"variant": name, "passed": name != "wrong", "worst_over_tol": 5.0 if name == "wrong" else 0.1}
    if name.startswith("bwd:"):
        row["bwd_B1_L8192_ms"] = {"bwd:fastb": 15.0, "bwd:slowb": 30.0}[name]
    else:
        row["fwd_B1_L8192_ms"] = {"triton": 4.0, "fast": 2.0, "slow": 3.0, "wrong": 1.0}[name]
    if name == "triton":
        row["bwd_B1_L8192_ms"] = 20.0
    with open(rows, "a") as f:
        f.write(json.dumps(row) + "\\n")
'''


def _sweep_module():
    spec = importlib.util.spec_from_file_location("sweep_gluon_scan", ROOT / "scripts" / "sweep_gluon_scan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_crashing_or_hanging_variant_does_not_stop_the_rest(tmp_path):
    sweep = _sweep_module()
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE_WORKER)
    names = ["triton", "crash", "fast", "hang", "wrong", "slow", "bwd:fastb", "bwd:slowb"]
    rows = sweep.drive(str(tmp_path), names, variant_timeout=2, total_timeout=30,
                       worker=[sys.executable, str(worker)], startup=5)
    by_name = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == names
    assert "died" in by_name["crash"]["error"] and "timed out" in by_name["hang"]["error"]
    assert by_name["fast"]["passed"] and by_name["slow"]["passed"] and not by_name["wrong"]["passed"]
    # the fastest variant that passed wins; a faster wrong one and the baseline do not
    best = sweep.winners(rows)
    assert best["fwd_B1_L8192_ms"]["variant"] == "fast"
    assert best["bwd_B1_L8192_ms"] == {"variant": "fastb", "ms": 15.0, "beats_triton": True}
    text = sweep.summary(rows, {}, best)
    assert "FAILED: the worker died" in text and "FAIL" in text.split("wrong")[1].splitlines()[0]
    assert "bwd:slowb" in text.split("Gluon backward variants")[1]
    sweep.write_winners(str(tmp_path), best)
    assert (tmp_path / "sweep-winner.txt").read_text().splitlines() == ["fast", "", "fastb"]
