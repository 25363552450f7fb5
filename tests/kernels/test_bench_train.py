"""``scripts/bench_train.py``'s packed rows (``--documents``): the boundaries it gives the models, and its refusal of
a document count that cannot pack; its rounds; its reading of the GPU's clock, power and temperature from
``nvidia-smi`` (the benchmark itself needs a GPU)."""

from __future__ import annotations

import subprocess
import sys
import time

from checkpoints import ROOT, load_script

SCRIPT = ROOT / "scripts" / "bench_train.py"


def test_a_row_packs_documents_of_equal_length_the_last_taking_the_remainder():
    packed = load_script("bench_train").packed
    assert packed(8192, 1, "cpu") is None
    assert packed(8192, 4, "cpu").tolist() == [0, 2048, 4096, 6144, 8192]
    bounds = packed(10, 3, "cpu")
    assert bounds.tolist() == [0, 3, 6, 10] and str(bounds.dtype) == "torch.int32"


def test_a_document_count_that_cannot_pack_is_refused_before_anything_runs():
    for extra in (["--documents", "0"], ["--seq-lens", "8192,16", "--documents", "32"]):
        run = subprocess.run([sys.executable, str(SCRIPT), *extra], capture_output=True, text=True, timeout=300)
        assert run.returncode == 2, run.stderr
        assert "give at least 1, and at most the shortest of --seq-lens" in run.stderr.splitlines()[-1], run.stderr


def test_rounds_alternate_the_order_so_drift_favours_neither_model():
    order = load_script("bench_train").round_order
    arms = ["plain", "upgraded", "full"]
    assert [order(arms, r) for r in range(3)] == [arms, ["upgraded", "plain", "full"], arms]
    assert order(["plain"], 1) == ["plain"]


def test_rounds_combine_into_each_models_median_and_the_median_of_their_own_ratios():
    combine = load_script("bench_train").combine_rounds

    def run(tokens_per_s, peak):
        return {"step_s": 8192 / tokens_per_s, "tokens_per_s": tokens_per_s, "peak_gib": peak,
                "peak_extra_gib": peak - 1}

    # the machine slows in round 2: the ratio of each round's pair stays near 0.9, the medians of the
    # models' own speeds give 0.9 only by luck of the pairing
    rounds = [{"plain": run(1000, 10), "upgraded": run(900, 12)},
              {"plain": run(800, 10), "upgraded": run(720, 13)},
              {"plain": run(1000, 11), "upgraded": run(910, 12)}]
    result = combine(rounds, ["plain", "upgraded"])
    assert [round(r, 3) for r in result["ratios"]] == [0.9, 0.9, 0.91]
    assert result["throughput_ratio"] == 0.9
    assert result["plain"]["tokens_per_s"] == 1000 and result["upgraded"]["tokens_per_s"] == 900
    assert result["plain"]["peak_gib"] == 11 and result["upgraded"]["peak_gib"] == 13
    assert result["memory_ratio"] == 13 / 11
    assert result["upgraded"]["round_tokens_per_s"] == [900, 720, 910]
    assert result["upgraded"]["round_gpu_states"] == [None, None, None]
    assert result["upgraded"]["round_steps_s"] == [None, None, None]
    with_steps = [{label: {**r[label], "steps_s": [r[label]["step_s"], 2 * r[label]["step_s"]]} for label in r}
                  for r in rounds]
    assert combine(with_steps, ["plain", "upgraded"])["plain"]["round_steps_s"] == [
        [8.192, 16.384], [10.24, 20.48], [8.192, 16.384]]
    # each model's fastest step over every round, and their ratio (none without the rounds' steps)
    fastest = combine(with_steps, ["plain", "upgraded"])
    assert fastest["fastest_steps_s"] == {"plain": 8.192, "upgraded": 8192 / 910}
    assert abs(fastest["fastest_step_ratio"] - 0.91) < 1e-12
    assert "fastest_step_ratio" not in result
    # the profiled round's GPU kernel time a step (--profile profiles the first round), and its ratio
    profiled = [{label: {**r[label], "profile": {"kernel_ms": ms}} for label, ms in (("plain", 374.0),
                                                                                   ("upgraded", 457.0))}
                if i == 0 else r for i, r in enumerate(rounds)]
    kernels = combine(profiled, ["plain", "upgraded"])
    assert kernels["kernel_ms"] == {"plain": 374.0, "upgraded": 457.0}
    assert abs(kernels["kernel_time_ratio"] - 374 / 457) < 1e-12
    assert "kernel_time_ratio" not in result
    # a profile that caught no kernel gives no ratio (and no division by zero)
    empty = [{label: {**r[label], "profile": {"kernel_ms": 0.0}} for label in r} for r in rounds]
    assert "kernel_time_ratio" not in combine(empty, ["plain", "upgraded"])
    # an even count takes the mean of the middle two ratios
    assert abs(combine(rounds[:2] + [{"plain": run(1000, 10), "upgraded": run(950, 12)},
                                     {"plain": run(1000, 10), "upgraded": run(800, 12)}],
                       ["plain", "upgraded"])["throughput_ratio"] - 0.9) < 1e-12
    # a model out of memory in any round is reported, with no ratio
    failed = combine([rounds[0], {"plain": run(800, 10), "upgraded": {"error": "out of memory: x"}}],
                     ["plain", "upgraded"])
    assert failed["upgraded"] == {"error": "out of memory: x"} and "throughput_ratio" not in failed


def test_a_rounds_steps_print_as_their_fastest_and_slowest():
    steps_text = load_script("bench_train").steps_text
    assert steps_text([1.9, 1.8234, 2.0512]) == "1.823-2.051 s"
    assert steps_text(None) == "?" and steps_text([]) == "?"


def test_zero_rounds_are_refused_before_anything_runs():
    run = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "--rounds 0: give at least 1" in run.stderr.splitlines()[-1], run.stderr


def smi(*answers):
    """A stand-in for ``subprocess.run`` that answers nvidia-smi with ``(stdout, returncode)`` in turn."""
    calls = []

    def run(command, **kwargs):
        stdout, returncode = answers[min(len(calls), len(answers) - 1)]
        calls.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, "")

    run.calls = calls
    return run


def test_the_gpu_state_is_read_from_nvidia_smi_and_missing_readings_give_none():
    bench = load_script("bench_train")
    run = smi(("1755, 689.42, 68, 0x0000000000000004\n", 0))
    state = bench.gpu_state("GPU-1234", run=run)
    assert state == {"sm_clock_mhz": 1755.0, "power_w": 689.42, "temperature_c": 68.0, "clock_reasons": 4}
    assert run.calls[0][:2] == ["nvidia-smi", "--id=GPU-1234"] and "--format=csv,noheader,nounits" in run.calls[0]
    assert "clocks_event_reasons.active" in run.calls[0][2]
    assert bench.state_text(state) == "1,755 MHz 689 W 68 C, power cap"
    # a reading the GPU does not give is None, the others stay
    assert bench.gpu_state(0, run=smi(("1980, [N/A], 40, 0x0\n", 0))) == {
        "sm_clock_mhz": 1980.0, "power_w": None, "temperature_c": 40.0, "clock_reasons": 0}
    assert bench.state_text({"sm_clock_mhz": 1980.0, "power_w": None, "temperature_c": 40.0}) == "1,980 MHz ? 40 C"
    # an nvidia-smi that does not know the reasons' field is asked without it
    older = smi(('Field "clocks_event_reasons.active" is not a valid field to query.\n', 2), ("1980, 300, 50\n", 0))
    assert bench.gpu_state(0, run=older) == {"sm_clock_mhz": 1980.0, "power_w": 300.0, "temperature_c": 50.0}
    assert "clocks_event_reasons.active" not in older.calls[1][2]
    assert bench.gpu_state(0, run=smi(("", 6))) is None  # no such GPU
    assert bench.gpu_state(0, run=smi(("[N/A], [N/A], [N/A], [N/A]\n", 0))) is None

    def missing(command, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    def hung(command, **kwargs):
        raise subprocess.TimeoutExpired(command, 20)

    assert bench.gpu_state(0, run=missing) is None and bench.gpu_state(0, run=hung) is None
    assert bench.state_text(None) == "no GPU state"


def test_readings_over_a_run_keep_the_lowest_clock_the_highest_power_and_heat_and_every_reason():
    bench = load_script("bench_train")
    combined = bench.combine_states([
        {"sm_clock_mhz": 1980.0, "power_w": 500.0, "temperature_c": 60.0, "clock_reasons": 0},
        None,
        {"sm_clock_mhz": 1755.0, "power_w": 700.0, "temperature_c": 58.0, "clock_reasons": 0x4},
        {"sm_clock_mhz": 1800.0, "power_w": None, "temperature_c": 71.0, "clock_reasons": 0x20}])
    assert combined == {"sm_clock_mhz": 1755.0, "power_w": 700.0, "temperature_c": 71.0, "clock_reasons": 0x24,
                        "readings": 3}
    assert bench.state_text(combined) == "1,755 MHz 700 W 71 C, power cap + sw thermal"
    assert bench.combine_states([None, None]) is None


def test_the_sampler_reads_while_the_steps_run_and_once_at_the_end_of_a_short_run():
    bench = load_script("bench_train")
    clocks = iter(range(1900, 1000, -10))

    def read(device):
        assert device == "GPU-1"
        return {"sm_clock_mhz": float(next(clocks)), "power_w": 600.0, "temperature_c": 60.0, "clock_reasons": 0}

    sampler = bench.GpuSampler("GPU-1", every=0.01, read=read).start()
    deadline = time.time() + 5
    while len(sampler.readings) < 3 and time.time() < deadline:
        time.sleep(0.01)
    state = sampler.stop()
    assert state["readings"] >= 3 and state["sm_clock_mhz"] <= 1880.0  # the lowest of several readings
    short = bench.GpuSampler("GPU-1", every=60, read=read).start()
    assert short.stop()["readings"] == 1  # stopped before the first period: one reading at the stop
    assert bench.GpuSampler("GPU-1", read=read).stop()["readings"] == 1  # never started (no timed step)


def test_kernel_families():
    """The profile sums kernels by family: the scan's, SSD's, the projections' and the fused elementwise ops'."""
    kernel_family = load_script("bench_train").kernel_family
    assert kernel_family("palimpsa_bwd_local_cuda") == "palimpsa scan"
    assert kernel_family("_chunk_scan_fwd_kernel") == "mamba_ssm SSD"
    assert kernel_family("nvjet_sm90_tst_304x128_64x3_1x2_h_bz_coopA_TNN") == "matrix products"
    for name in ("gains_bwd_kernel", "readout_fwd_kernel", "conv_bwd_kernel", "add_norm_fwd_kernel"):
        assert kernel_family(name) == "fused elementwise", name
    assert kernel_family("void at::native::vectorized_elementwise_kernel<8, ...>") == "other"
