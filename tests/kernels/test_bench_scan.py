"""``scripts/bench_scan.py``'s rounds (``--rounds``): the order in which a round times the backends and the baseline,
the medians and the rounds' own ratios it reports, a backend that fails in a later round, and the refusal of a round
count below 1 (the benchmark itself needs a GPU, so the timings here are scripted)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from checkpoints import ROOT, load_script

SCRIPT = ROOT / "scripts" / "bench_scan.py"


def test_rounds_reverse_the_order_every_other_round():
    order = load_script("bench_scan").round_order
    names = ["chunked", "gluon", "base"]
    assert [order(names, r) for r in range(3)] == [names, ["base", "gluon", "chunked"], names]


def test_rounds_combine_into_medians_and_the_median_of_their_own_ratios():
    combine = load_script("bench_scan").combine_rounds
    times = {"chunked": {"fwd": [2.0, 2.2, 2.1], "fwdbwd": [11.0, 11.4, 11.2]},
             "base": {"fwd": [0.5, 0.8, 0.6], "fwdbwd": [4.4, 4.6, 5.6]}}
    row = combine(times, ["chunked"])
    assert row["chunked_fwd_ms"] == 2.1 and row["base_fwd_ms"] == 0.6 and row["base_fwdbwd_ms"] == 4.6
    assert row["chunked_fwd_x_rounds"] == pytest.approx([4.0, 2.75, 3.5])
    # the median of the rounds' ratios, not the ratio of the medians (which f+b tells apart: 11.2 / 4.6)
    assert row["chunked_fwd_x"] == pytest.approx(3.5)
    assert row["chunked_fwdbwd_x"] == pytest.approx(median([11.0 / 4.4, 11.4 / 4.6, 11.2 / 5.6]))
    assert row["chunked_fwdbwd_x"] != pytest.approx(11.2 / 4.6)
    assert row["chunked_fwdbwd_rounds_ms"] == [11.0, 11.4, 11.2]
    # an even count: the mean of the two middle values; a backend with fewer rounds than the baseline: no ratio
    two = combine({"a": {"fwd": [1.0, 3.0], "fwdbwd": [1.0]}, "base": {"fwd": [1.0, 1.0], "fwdbwd": [1.0, 1.0]}},
                  ["a"])
    assert two["a_fwd_ms"] == 2.0 and two["a_fwd_x"] == 2.0 and "a_fwdbwd_x" not in two


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def test_a_shape_times_every_backend_and_the_baseline_in_turn_and_drops_one_that_fails(monkeypatch, capsys):
    bench = load_script("bench_scan")
    calls, scripted = [], {("good", "fwd"): iter([2.0, 2.4, 2.2]), ("good", "fwdbwd"): iter([11.0, 11.6, 11.2]),
                           ("base", "fwd"): iter([0.5, 0.6, 0.8]), ("base", "fwdbwd"): iter([4.0, 4.0, 4.0]),
                           ("bad", "fwd"): iter([3.0]), ("bad", "fwdbwd"): iter([12.0])}

    def timed(name, kind):
        def fn():
            calls.append(name + ("" if kind == "fwd" else "+b"))
            value = next(scripted[name, kind], None)
            if value is None:
                raise RuntimeError(f"{name} broke")
            return value
        return fn

    monkeypatch.setattr(bench, "scan_inputs", lambda batch, length: {})
    monkeypatch.setattr(bench, "ours", lambda inputs, backend="triton", with_beta=True:
                        (timed(backend, "fwd"), timed(backend, "fwdbwd")))
    monkeypatch.setattr(bench, "ssd", lambda inputs, chunk_scan: (timed("base", "fwd"), timed("base", "fwdbwd")))
    monkeypatch.setattr(bench, "median_ms", lambda fn: fn())
    monkeypatch.setattr(bench, "peak_extra_gib", lambda fn: 1.0)
    monkeypatch.setattr(bench, "floors_ms", lambda batch, length, clock: (1.0, 2.0))
    [row] = bench.bench_scans([(1, 8192)], chunk_scan=object(), backends=("good", "bad"), rounds=3)
    # round 0 in order, round 1 reversed (where "bad" fails and leaves), round 2 in order without it
    assert calls == ["good", "good+b", "bad", "bad+b", "base", "base+b",
                     "base", "base+b", "bad", "good", "good+b",
                     "good", "good+b", "base", "base+b"]
    assert row["good_fwd_ms"] == 2.2 and row["base_fwd_ms"] == 0.6 and row["good_fwd_rounds_ms"] == [2.0, 2.4, 2.2]
    assert row["good_fwd_x"] == pytest.approx(median([2.0 / 0.5, 2.4 / 0.6, 2.2 / 0.8]))
    assert row["bad_error"] == "RuntimeError: bad broke" and "bad_fwd_ms" not in row and "bad_peak_gib" not in row
    assert row["good_peak_gib"] == 1.0 and row["base_peak_gib"] == 1.0 and row["rounds"] == 3
    printed = capsys.readouterr().out
    assert "good 2.20 / 11.20 ms (x 2.75-4.00 / 2.75-2.90 over 3 rounds), bad failed, mamba_ssm SSD 0.60" in printed


def test_a_round_count_below_one_is_refused_before_anything_runs():
    run = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "--rounds 0: give 1 or more" in run.stderr.splitlines()[-1], run.stderr
