"""Benchmark the GPU Palimpsa scan (Gluon forward, Triton) against Mamba2's SSD (mamba_ssm) at mamba2-2.7b shapes.

Times (``triton.testing.do_bench`` medians) the forward, forward + backward and peak extra memory of
``palimpsa_scan`` for each backend of ``--backends`` (default: ``gluon,sequential,chunked``: the Gluon forward, and
the Triton forward with each of the two Triton backwards, side by side in one run; a backend that fails to compile
or run is reported and skipped) and of mamba_ssm's
``mamba_chunk_scan_combined`` side by side, bf16 inputs (``--float32``: ours float32),
80 heads, P = 64, N = 128, one group, B in {1, 4}, L in {2048, 8192, 16384}; then one decoding step
(``palimpsa_step``) against a Mamba2 step (mamba_ssm's ``selective_state_update``). If mamba_ssm cannot be
imported, says so and times our op with ``beta=None`` (and a plain PyTorch step) in its place.

Each time is also given as a fraction of its floor (kernel-design.md): the forward's is one MUFU reciprocal per
state element and token (``B L H P N / (SMs x 16 x clock)``), the backward's ~25.5 FP32-pipe instructions per
element and token (``/ (SMs x 128 x clock)``); the SM clock comes from ``nvidia-smi`` (max SM clock) unless
``--clock-ghz`` is given.

mamba_ssm is a benchmark-only dependency: on a box without its CUDA extension, put its pure-Python wheel's
contents and an empty ``selective_scan_cuda.py`` on ``PYTHONPATH`` (docs/kernels.md says how).

    python scripts/bench_scan.py [--backends gluon,gluon@c2l2u2,gluon-bwd,triton] [--json out.json] [--sweep] [--quick]
    python scripts/bench_scan.py --quick --backends sequential,chunked,chunked@NSPLIT=2 --breakdown   # the two bwds
    python scripts/bench_scan.py --compare [--json out.json]    # backward tilings, interleaved rounds
    python scripts/bench_scan.py --no-step --shapes 4x2048,4x8192 --backends gluon,triton    # chosen shapes only
    python scripts/bench_scan.py --no-step --backends fwd-seq:chunked,chunked    # the two Triton forwards
    python scripts/bench_scan.py --no-step --backends "chunked,fwd[walk_BV=8:walk_warps=1]:chunked"   # walk tilings
    python scripts/bench_scan.py --no-step --float32 --shapes 1x8192 --breakdown   # what fine-tuning feeds it
    python scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --backends chunked --rounds 5 --graphs
        # the targets' shapes: 5 interleaved rounds (median ratios and their range), and CUDA-graph replays
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import subprocess
import sys
import traceback
import types

import torch
import triton
from palimpsa.kernels import fused_recurrent, palimpsa_scan, palimpsa_step
from triton.testing import do_bench, do_bench_cudagraph

HEADS, HEAD_DIM, STATE = 80, 64, 128
OURS_DTYPE = torch.bfloat16  # our scan's v, k, q, beta (--float32: float32)
GIB = 2**30


def load_mamba_ssm():
    """``(mamba_chunk_scan_combined, selective_state_update, note)``, or Nones and the reason."""
    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        return mamba_chunk_scan_combined, selective_state_update, "mamba_ssm imported"
    except Exception as error:  # noqa: BLE001 - any import failure means "not available"
        reason = f"{type(error).__name__}: {error}"
    # mamba_ssm/__init__.py imports every model class; the Triton ops need none of them
    for name in [m for m in sys.modules if m.startswith("mamba_ssm")]:
        del sys.modules[name]
    try:
        spec = importlib.util.find_spec("mamba_ssm")
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["mamba_ssm"] = package
        ssd = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
        step = importlib.import_module("mamba_ssm.ops.triton.selective_state_update")
        return ssd.mamba_chunk_scan_combined, step.selective_state_update, f"mamba_ssm ops imported ({reason})"
    except Exception as error:  # noqa: BLE001
        return None, None, f"mamba_ssm not importable: {reason}; then {type(error).__name__}: {error}"


def scan_inputs(batch, length, with_beta=True, seed=0):
    """Our scan's inputs in ``OURS_DTYPE`` (decays float32), and SSD's (``x``, ``dt``, ``A``) from the same draws
    in bf16."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    bf16, ours_dtype = torch.bfloat16, OURS_DTYPE
    dt = 0.001 + 0.099 * torch.rand(batch, length, HEADS, generator=gen, device="cuda")
    a = -torch.empty(HEADS, device="cuda").uniform_(1, 16, generator=gen)
    x = torch.randn(batch, length, HEADS, HEAD_DIM, generator=gen, device="cuda")
    return {
        "v": (dt[..., None] * x).to(ours_dtype),
        "k": torch.randn(batch, length, 1, STATE, generator=gen, device="cuda").to(ours_dtype),
        "q": torch.randn(batch, length, 1, STATE, generator=gen, device="cuda").to(ours_dtype),
        "log_decay": dt * a,
        "beta": (torch.rand(batch, length, HEADS, HEAD_DIM, generator=gen, device="cuda")
                 * dt[..., None]).to(ours_dtype) if with_beta else None,
        "x": x.to(bf16), "dt": dt.to(bf16), "A": a,
    }


def ours(inputs, fwd_config=None, bwd_config=None, chunk_size=None, block_size=None, with_beta=True,
         backend="triton"):
    names = ["v", "k", "q", "log_decay"] + (["beta"] if with_beta else [])
    leaves = {n: inputs[n].detach().requires_grad_(True) for n in names}
    # one fixed output gradient, so that every configuration's gradients can be compared with the default's
    dy = torch.randn(inputs["v"].shape, generator=torch.Generator(device="cuda").manual_seed(99), device="cuda",
                     dtype=inputs["v"].dtype)
    beta = leaves.get("beta")
    state = None
    if backend.startswith("state:"):  # state:<backend>: with initial states in (M0, I0 with gradients)
        backend = backend.removeprefix("state:")
        batch, _, heads, head_dim = inputs["v"].shape
        gen = torch.Generator(device="cuda").manual_seed(7)
        shape = (batch, heads, head_dim, inputs["k"].shape[-1])
        leaves["M0"] = (0.1 * torch.randn(shape, generator=gen, device="cuda")).requires_grad_(True)
        leaves["I0"] = (1 + torch.rand(shape, generator=gen, device="cuda")).requires_grad_(True)
        state = (leaves["M0"], leaves["I0"])
    if backend.startswith("fwd-seq:") and fwd_config is None:  # fwd-seq:<backend>: the sequential Triton forward
        fwd_config, backend = dict(fused_recurrent.FWD_CONFIG), backend.removeprefix("fwd-seq:")
    if backend.startswith("fwd-seq[") and fwd_config is None:  # fwd-seq[BV=8:num_warps=1]:<backend>: its tiling
        keys, _, backend = backend.removeprefix("fwd-seq[").partition("]:")
        fwd_config = {**fused_recurrent.FWD_CONFIG, **config_keys(keys)}
    if backend.startswith("fwd[") and fwd_config is None:  # fwd[KEY=VALUE:...]:<backend>: the chunked forward, so
        keys, _, backend = backend.removeprefix("fwd[").partition("]:")
        fwd_config = {"kernel": "chunked", **config_keys(keys)}
    if backend == "gluon-bwd" and fwd_config is None:  # the Gluon forward and backward (opt-in in palimpsa_scan)
        fwd_config, bwd_config = {"kernel": "gluon"}, {"kernel": "gluon"}
    if backend.split("@")[0] == "chunked" and bwd_config is None:  # chunked[@KEY=VALUE:...]: the chunk-parallel bwd
        bwd_config = chunked_config(backend)
    if backend.split("@")[0] == "sequential" and bwd_config is None:  # sequential[@KEY=VALUE:...]: the sequential
        bwd_config = {**fused_recurrent._backward_config(inputs["v"].shape[0], HEADS, HEAD_DIM, torch.device("cuda")),
                      **config_keys(backend.partition("@")[2])}  # backward (BWD_CONFIG's keys, GROUP, GAUGE)
    if backend.startswith("gluon@") and fwd_config is None:  # gluon@<forward variant>[/<backward variant>]
        fwd_name, _, bwd_name = backend.removeprefix("gluon@").partition("/")
        fwd_config = {"kernel": "gluon", "variant": fwd_name}
        bwd_config = {"kernel": "gluon", "variant": bwd_name} if bwd_name else None

    def forward():
        if fwd_config is None and bwd_config is None:
            return palimpsa_scan(leaves["v"], leaves["k"], leaves["q"], leaves["log_decay"], beta,
                                 initial_state=state, backend=backend).y
        y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
            leaves["v"], leaves["k"], leaves["q"], leaves["log_decay"], beta, 1.0, state, False, False,
            fwd_config=fwd_config, bwd_config=bwd_config, chunk_size=chunk_size, block_size=block_size)
        return y

    def forward_only():
        with torch.no_grad():
            return forward()

    def forward_backward():
        return torch.autograd.grad(forward(), list(leaves.values()), dy)

    return forward_only, forward_backward


def config_keys(items: str) -> dict:
    """``BV=4:NSPLIT=8:DOT=tf32x3`` -> ``{"BV": 4, "NSPLIT": 8, "DOT": "tf32x3"}`` (numbers as ints)."""
    config = {}
    for item in filter(None, items.split(":")):
        key, _, value = item.partition("=")
        config[key] = int(value) if value.lstrip("-").isdigit() else value
    return config


def chunked_config(backend: str) -> dict:
    """``chunked@BV=4:NSPLIT=8:DOT=tf32x3`` -> the chunk-parallel backward's bwd_config (chunked_bwd.CHUNKED_CONFIG's
    keys)."""
    return {"kernel": "chunked", **config_keys(backend.partition("@")[2])}


def breakdown(backends, batch=1, length=8192, rounds=5) -> list:
    """The chunk-parallel backward's three launches timed with CUDA events (median of ``rounds`` fwd+bwd), for the
    ``chunked`` backends of ``backends``, with the local passes that ran (``chunked_bwd.LOCAL_RUNS``: a Gluon pass
    that failed under ``LOCAL`` "auto" shows as "triton")."""
    from palimpsa.kernels import chunked_bwd

    rows = []
    inputs = scan_inputs(batch, length)
    for backend in (b for b in backends if b.rpartition("]:")[2].split("@")[0] == "chunked"):  # fwd[...]: too
        _, fwd_bwd = ours(inputs, backend=backend)
        before = dict(chunked_bwd.LOCAL_RUNS)
        fwd_bwd()
        times = {}
        for _ in range(rounds):
            chunked_bwd.TIMINGS = []
            fwd_bwd()
            torch.cuda.synchronize()
            for name, start, end in chunked_bwd.TIMINGS:
                times.setdefault(name, []).append(start.elapsed_time(end))
        chunked_bwd.TIMINGS = None
        ran = sorted(chunked_bwd.local_runs_since(before))
        row = {"backend": backend, "B": batch, "L": length, "local_passes": ran,
               **{f"{name}_ms": sorted(v)[len(v) // 2] for name, v in times.items()}}
        rows.append(row)
        print(f"  {backend} B={batch} L={length}: " + ", ".join(f"{n} {row[f'{n}_ms']:.2f} ms" for n in times)
              + f" (local pass: {', '.join(ran) or 'none, the sequential backward'})", flush=True)
    return rows


def ssd(inputs, chunk_scan):
    leaves = {n: inputs[n].detach().requires_grad_(True) for n in ("x", "dt", "A", "k", "q")}
    dt_bias = torch.zeros(HEADS, device="cuda", requires_grad=True)
    dy = torch.randn_like(inputs["x"])

    def forward():
        return chunk_scan(leaves["x"], leaves["dt"], leaves["A"], leaves["k"], leaves["q"], chunk_size=256,
                          dt_bias=dt_bias, dt_softplus=True)

    def forward_only():
        with torch.no_grad():
            return forward()

    def forward_backward():
        return torch.autograd.grad(forward(), [*leaves.values(), dt_bias], dy)

    return forward_only, forward_backward


def peak_extra_gib(fn) -> float:
    """Peak memory allocated while ``fn`` runs (its results kept), above what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del result
    return peak / GIB


def median_ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def graph_ms(fn) -> float:
    """Median time of ``fn`` replayed from a CUDA graph: the kernel without the Python launch overhead."""
    return do_bench_cudagraph(fn, rep=100, return_mode="median")


BWD_INSTRUCTIONS = 25.5  # FP32-pipe instructions per element and token of the backward at its floor


def sm_clock_ghz() -> tuple[float, str]:
    """The GPU's maximum SM clock from nvidia-smi, or the H200's 1.98 GHz where that fails."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i",
                              str(torch.cuda.current_device())], capture_output=True, text=True, timeout=30)
        return float(out.stdout.split()[0]) / 1e3, "nvidia-smi clocks.max.sm"
    except Exception as error:  # noqa: BLE001 - any failure: the documented default
        return 1.98, f"default (nvidia-smi: {type(error).__name__})"


def floors_ms(batch: int, length: int, clock_ghz: float) -> tuple[float, float]:
    """``(forward, backward)`` floors in ms: one MUFU op per element-token at 16 per SM per clock, and
    BWD_INSTRUCTIONS per element-token at 128 per SM per clock."""
    elements = batch * length * HEADS * HEAD_DIM * STATE
    per_ms = torch.cuda.get_device_properties(0).multi_processor_count * clock_ghz * 1e6
    return elements / (16 * per_ms), elements * BWD_INSTRUCTIONS / (128 * per_ms)


def median(values: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def round_order(names: list, index: int) -> list:
    """The timed functions in round ``index``: as given in even rounds, reversed in odd ones, so that a GPU or host
    whose speed drifts over the run favours none of them."""
    return list(names) if index % 2 == 0 else list(reversed(names))


def combine_rounds(times: dict, backends, base: str = "base") -> dict:
    """A shape's row entries from its rounds (``times[name][kind]``: one ms a round, ``kind`` "fwd" or "fwdbwd",
    ``name`` a backend or ``base``): each name's median over the rounds, and for each backend the rounds' own
    ratios to the baseline (each from two timings near each other in time) with their median, lowest and highest.
    A backend without a time in every round gets no ratios."""
    row = {}
    for name, kinds in times.items():
        key = "base" if name == base else name
        for kind, values in kinds.items():
            if values:
                row[f"{key}_{kind}_ms"] = median(values)
                row[f"{key}_{kind}_rounds_ms"] = list(values)
    for backend in backends:
        for kind in ("fwd", "fwdbwd"):
            ours_ms, base_ms = times.get(backend, {}).get(kind, []), times.get(base, {}).get(kind, [])
            if ours_ms and len(ours_ms) == len(base_ms):
                ratios = [o / b for o, b in zip(ours_ms, base_ms, strict=True)]
                row[f"{backend}_{kind}_x_rounds"] = ratios
                row[f"{backend}_{kind}_x"] = median(ratios)
    return row


def bench_scans(shapes, chunk_scan, backends=("triton",), clock_ghz=1.98, progress=None, rounds=1, graphs=False):
    """One row per shape: every backend's times, the baseline's and the floors; ``progress(rows)`` after each row
    (so that a run cut short by a time limit still leaves what it measured). Every time is the median of ``rounds``
    do_bench medians, the backends and the baseline taken in turn within a round (:func:`round_order`); ``graphs``
    also times each of them replayed from a CUDA graph (the GPU's time without Python's launches)."""
    rows = []
    for batch, length in shapes:
        inputs = scan_inputs(batch, length)
        row = {"B": batch, "L": length, "rounds": rounds}
        row["floor_fwd_ms"], row["floor_bwd_ms"] = floors_ms(batch, length, clock_ghz)
        runs = {}
        for backend in backends:
            try:
                runs[backend] = ours(inputs, backend=backend)
            except Exception as error:  # noqa: BLE001 - report a failing path, time the others
                traceback.print_exc()
                row[f"{backend}_error"] = f"{type(error).__name__}: {error}"
        if chunk_scan is not None:
            runs["base"] = ssd(inputs, chunk_scan)
            row["baseline"] = "mamba_ssm SSD"
        else:
            runs["base"] = ours(inputs, with_beta=False)
            row["baseline"] = "triton beta=None"
        times = {name: {"fwd": [], "fwdbwd": []} for name in runs}
        for index in range(rounds):
            for name in round_order(list(runs), index):
                if name not in runs:  # failed in an earlier round
                    continue
                fwd, fwd_bwd = runs[name]
                try:
                    fwd_ms, fwd_bwd_ms = median_ms(fwd), median_ms(fwd_bwd)
                except Exception as error:  # noqa: BLE001 - report a failing path, time the others
                    if name == "base":
                        raise
                    traceback.print_exc()
                    row[f"{name}_error"] = f"{type(error).__name__}: {error}"
                    del runs[name], times[name]
                    continue
                times[name]["fwd"].append(fwd_ms)
                times[name]["fwdbwd"].append(fwd_bwd_ms)
        row.update(combine_rounds(times, backends))
        for name, (_, fwd_bwd) in runs.items():
            row[f"{name}_peak_gib"] = peak_extra_gib(fwd_bwd)
        if graphs:
            for name, (fwd, fwd_bwd) in runs.items():
                try:
                    row[f"{name}_fwd_graph_ms"], row[f"{name}_fwdbwd_graph_ms"] = graph_ms(fwd), graph_ms(fwd_bwd)
                except Exception as error:  # noqa: BLE001 - a path that cannot be captured: say so, go on
                    row[f"{name}_graph_error"] = f"{type(error).__name__}: {error}"
                    print(f"  {name}: no CUDA-graph timing ({row[f'{name}_graph_error'][:200]})", flush=True)
        rows.append(row)
        if progress is not None:
            progress(rows)
        timed = ", ".join(f"{b} {row[f'{b}_fwd_ms']:.2f} / {row[f'{b}_fwdbwd_ms']:.2f} ms" + spread(row, b)
                          if f"{b}_fwd_ms" in row else f"{b} failed" for b in backends)
        print(f"  B={batch} L={length}: {timed}, {row['baseline']} {row['base_fwd_ms']:.2f} / "
              f"{row['base_fwdbwd_ms']:.2f} ms", flush=True)
        del inputs, runs
    return rows


def spread(row: dict, backend: str) -> str:
    """`` (x 3.1-3.3 / 2.4-2.6 over 5 rounds)``: the lowest and highest of the rounds' ratios, where there are
    several rounds."""
    fwd, fwd_bwd = row.get(f"{backend}_fwd_x_rounds", []), row.get(f"{backend}_fwdbwd_x_rounds", [])
    if len(fwd) < 2 or len(fwd_bwd) < 2:
        return ""
    return (f" (x {min(fwd):.2f}-{max(fwd):.2f} / {min(fwd_bwd):.2f}-{max(fwd_bwd):.2f} over {len(fwd)} "
            "rounds)")


def bench_step(batch, state_update, gen):
    """One decoding step of ours and of Mamba2 (float32 and bf16 state) at one batch size."""
    bf16 = torch.bfloat16
    v = torch.randn(batch, HEADS, HEAD_DIM, generator=gen, device="cuda").to(bf16)
    k, q = (torch.randn(batch, 1, STATE, generator=gen, device="cuda").to(bf16) for _ in range(2))
    dt = 0.001 + 0.099 * torch.rand(batch, HEADS, generator=gen, device="cuda")
    a = -torch.empty(HEADS, device="cuda").uniform_(1, 16, generator=gen)
    beta = torch.rand(batch, HEADS, HEAD_DIM, generator=gen, device="cuda").to(bf16)
    memory = torch.randn(batch, HEADS, HEAD_DIM, STATE, generator=gen, device="cuda")
    importance = 1 + torch.rand(batch, HEADS, HEAD_DIM, STATE, generator=gen, device="cuda")
    log_decay = dt * a

    def ours_step():
        return palimpsa_step(v, k, q, log_decay, beta, (memory, importance))

    row = {"B": batch, "ours_step_us": 1e3 * median_ms(ours_step), "ours_step_graph_us": 1e3 * graph_ms(ours_step)}
    a_full = a[:, None, None].expand(HEADS, HEAD_DIM, STATE)
    dt_full = dt.to(bf16)[:, :, None].expand(batch, HEADS, HEAD_DIM)
    bias = torch.zeros(HEADS, device="cuda")[:, None].expand(HEADS, HEAD_DIM)
    skip = torch.ones(HEADS, device="cuda")[:, None].expand(HEADS, HEAD_DIM)  # Mamba2's D (mamba_ssm needs one)
    for state_dtype, key in ((torch.float32, "mamba2_step_f32state"), (torch.bfloat16, "mamba2_step_bf16state")):
        h = torch.randn(batch, HEADS, HEAD_DIM, STATE, generator=gen, device="cuda").to(state_dtype)
        if state_update is not None:
            def step(h=h):
                return state_update(h, v, dt_full, a_full, k, q, D=skip, dt_bias=bias, dt_softplus=True)
        else:
            def step(h=h):
                decay = (dt * a).exp()[:, :, None, None]
                h.mul_(decay.to(h.dtype)).add_((dt[..., None] * v)[..., None].to(h.dtype) * k[:, :, None])
                return (h * q[:, :, None]).sum(-1)
        row[key + "_us"] = 1e3 * median_ms(step)
        row[key + "_graph_us"] = 1e3 * graph_ms(step)
    print(f"  step B={batch}: ours {row['ours_step_us']:.1f} us (graph {row['ours_step_graph_us']:.1f}), "
          f"mamba2 f32 state {row['mamba2_step_f32state_us']:.1f} (graph {row['mamba2_step_f32state_graph_us']:.1f})"
          f", bf16 state {row['mamba2_step_bf16state_us']:.1f} (graph {row['mamba2_step_bf16state_graph_us']:.1f})",
          flush=True)
    return row


def bench_steps(batches, state_update):
    gen = torch.Generator(device="cuda").manual_seed(1)
    return [bench_step(batch, state_update, gen) for batch in batches]


def _relative(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def sweep(batch=1, length=8192):
    """Tilings and chunk sizes of our kernels at one shape: forward alone, then backward (fwd+bwd minus fwd).

    Every variant's outputs (and gradients) are compared with the default configuration's: the variants run the
    same algorithm, so they must agree to rounding (atomics add in a different order).
    """
    inputs = scan_inputs(batch, length)
    rows = []
    reference_fwd, reference_fwd_bwd = ours(inputs)
    y_ref, grads_ref = reference_fwd(), reference_fwd_bwd()
    fwd_configs = [(16, True, 4, 1), (16, True, 4, 2), (8, True, 2, 2), (8, True, 4, 2), (4, True, 1, 2),
                   (8, True, 1, 2)]
    best_fwd = None
    for bv, trans, warps, unroll in fwd_configs:
        cfg = {"BV": bv, "TRANS": trans, "UNROLL": unroll, "num_warps": warps}
        fwd, _ = ours(inputs, fwd_config=cfg, bwd_config=fused_recurrent.BWD_CONFIG)
        ms, diff = median_ms(fwd), _relative(fwd(), y_ref)
        rows.append({"kernel": "fwd", **cfg, "ms": ms, "rel_diff_vs_default": diff})
        print(f"  fwd {cfg}: {ms:.3f} ms (y vs default: {diff:.1e})", flush=True)
        best_fwd = min(best_fwd or (ms, cfg), (ms, cfg), key=lambda r: r[0])
    fwd_ms, fwd_cfg = best_fwd
    # maxnreg 200: ten one-warp programs per SM instead of eight (218 registers as launched), so B=1's 1280
    # programs fit one wave; ptxas reports no spill at 200 (docs/bench/scan-notes.md)
    bwd_configs = [(2, False, 1, 256, 8, None), (2, False, 1, 128, 8, None), (4, False, 1, 128, 8, None),
                   (4, False, 1, 128, 8, 200), (2, False, 1, 256, 16, None), (1, False, 1, 256, 8, None)]
    for bv, trans, warps, chunk, block, maxnreg in bwd_configs:
        cfg = {"BV": bv, "TRANS": trans, "num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})}
        _, fwd_bwd = ours(inputs, fwd_config=fwd_cfg, bwd_config=cfg, chunk_size=chunk, block_size=block)
        ms = median_ms(fwd_bwd)
        diff = max(_relative(g, r) for g, r in zip(fwd_bwd(), grads_ref, strict=True))
        rows.append({"kernel": "bwd", **cfg, "CT": chunk, "BS": block, "fwdbwd_ms": ms, "bwd_ms": ms - fwd_ms,
                     "rel_diff_vs_default": diff})
        print(f"  bwd {cfg} CT={chunk} BS={block}: fwd+bwd {ms:.3f} ms, bwd ~{ms - fwd_ms:.3f} ms "
              f"(grads vs default: {diff:.1e})", flush=True)
    default_step = dict(fused_recurrent.STEP_CONFIG)
    for bv, warps in ((16, 4), (32, 4), (64, 8)):
        fused_recurrent.STEP_CONFIG = {"BV": bv, "TRANS": False, "num_warps": warps}
        v = torch.randn(64, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(64, 1, STATE, device="cuda", dtype=torch.bfloat16)
        log_decay = -torch.rand(64, HEADS, device="cuda")
        state = (torch.randn(64, HEADS, HEAD_DIM, STATE, device="cuda"),
                 1 + torch.rand(64, HEADS, HEAD_DIM, STATE, device="cuda"))
        gain = v.abs()
        us = 1e3 * graph_ms(lambda v=v, k=k, log_decay=log_decay, state=state, gain=gain:
                            palimpsa_step(v, k, k, log_decay, gain, state))
        rows.append({"kernel": "step", "BV": bv, "num_warps": warps, "B": 64, "us": us})
        print(f"  step BV={bv} warps={warps} B=64: {us:.1f} us (graph)", flush=True)
    fused_recurrent.STEP_CONFIG = default_step
    return rows


def compare(batch=1, length=8192, rounds=4):
    """Backward configurations timed in interleaved rounds (fwd+bwd, default forward), so that clock and
    thermal drift during the run hit every configuration alike; prints each round and the medians."""
    inputs = scan_inputs(batch, length)
    # (BV, CT, BS): channels per program, tokens per checkpoint, tokens per scratch state
    configs = [(4, 128, 8), (2, 128, 8), (2, 256, 8), (4, 256, 8), (1, 256, 8), (2, 256, 16)]
    runs = {}
    for bv, chunk, block in configs:
        cfg = {"BV": bv, "TRANS": False, "num_warps": 1}
        runs[(bv, chunk, block)] = ours(inputs, fwd_config=fused_recurrent.FWD_CONFIG, bwd_config=cfg,
                                        chunk_size=chunk, block_size=block)[1]
    times = {key: [] for key in runs}
    for index in range(rounds):
        for key, fwd_bwd in runs.items():
            times[key].append(median_ms(fwd_bwd))
        print(f"  round {index}: " + ", ".join(f"BV={k[0]} CT={k[1]} BS={k[2]} {t[-1]:.2f}" for k, t in
                                                times.items()), flush=True)
    rows = []
    for (bv, chunk, block), values in times.items():
        peak = peak_extra_gib(runs[(bv, chunk, block)])
        rows.append({"BV": bv, "CT": chunk, "BS": block, "fwdbwd_ms": sorted(values)[len(values) // 2],
                     "rounds_ms": values, "peak_gib": peak})
        print(f"  BV={bv} CT={chunk} BS={block}: fwd+bwd median {rows[-1]['fwdbwd_ms']:.2f} ms "
              f"(rounds {', '.join(f'{v:.2f}' for v in values)}), peak extra {peak:.3f} GiB", flush=True)
    return rows


def copy_bandwidth_tbs() -> float:
    """Device-to-device copy of 2 GiB, bytes read plus written per second (TB/s)."""
    src = torch.empty(2 * GIB // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e12


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--backends", default="gluon,sequential,chunked",
                        help="comma-separated palimpsa_scan backends to time side by side (gluon: the Gluon forward "
                             "with the Triton backward; gluon@<fwd variant>[/<bwd variant>]: that one of "
                             "gluon_scan.FWD_VARIANTS, with the Triton backward or that of BWD_VARIANTS; gluon-bwd: "
                             "the Gluon forward and backward; triton: palimpsa_scan's Triton path as dispatched "
                             "(PALIMPSA_TRITON_BACKWARD, default auto); sequential[@KEY=VALUE:...]: the Triton "
                             "forward with the sequential backward, fused_recurrent.BWD_CONFIG's keys (and GROUP, "
                             "GAUGE, PREFETCH) overridden; chunked[@KEY=VALUE:...]: the Triton forward with the "
                             "chunk-parallel backward, chunked_bwd.CHUNKED_CONFIG's keys overridden; the Triton "
                             "forward is the one PALIMPSA_TRITON_FORWARD picks (auto: chunk-parallel at B = 1), "
                             "fwd-seq:<backend> that backend with the sequential Triton forward instead, "
                             "fwd-seq[KEY=VALUE:...]:<backend> with fused_recurrent.FWD_CONFIG's keys overridden, "
                             "state:<backend> with initial states (M0, I0) in, "
                             "fwd[KEY=VALUE:...]:<backend> with the chunk-parallel forward, "
                             "chunked_fwd.CHUNKED_FWD_CONFIG's keys overridden)")
    parser.add_argument("--clock-ghz", type=float, help="SM clock for the floors (default: nvidia-smi's max)")
    parser.add_argument("--no-step", action="store_true", help="skip the decoding-step benchmark")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every backend and the baseline this many times in turn at each shape (the order "
                             "reversed every other round) and report the medians and the median of the rounds' own "
                             "ratios, with their range (default %(default)s; at B = 1 SSD's time is mostly its "
                             "launches, so its ratio moves with the host: 3 or 5 rounds show how much)")
    parser.add_argument("--graphs", action="store_true",
                        help="also time every backend and the baseline replayed from a CUDA graph: the GPU's time "
                             "without Python's launches, in a second table")
    parser.add_argument("--sweep", action="store_true", help="also time tilings and chunk sizes of our kernels")
    parser.add_argument("--quick", action="store_true", help="B=1 only")
    parser.add_argument("--shapes", default=None,
                        help="comma list of BxL to time instead of every B in {1, 4} and L in {2048, 8192, 16384}, "
                        "e.g. 4x8192,4x2048")
    parser.add_argument("--profile", action="store_true",
                        help="one fwd+bwd at B=1, L=2048 of the first of --backends (to run under ncu)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the chunk-parallel backward's three launches (B=1, L=8192) of the chunked "
                             "backends")
    parser.add_argument("--compare", action="store_true",
                        help="only time backward configurations against each other in interleaved rounds")
    parser.add_argument("--chunk-size", type=int, default=fused_recurrent.CHUNK_SIZE,
                        help="tokens per scan checkpoint CT for every run of ours (default %(default)s)")
    parser.add_argument("--block-size", type=int, default=fused_recurrent.BLOCK_SIZE,
                        help="tokens per recompute state BS of the backward's scratch slab (default %(default)s; "
                             "half of it doubles the scratch)")
    parser.add_argument("--float32", action="store_true",
                        help="feed our scan float32 v, k, q, beta (as an upgraded layer does in fine-tuning), with "
                             "TF32 matrix products as bench_train.py --tf32 sets them; SSD keeps bf16, and so does "
                             "the decoding-step benchmark")
    parser.add_argument("--full-precision", action="store_true",
                        help="with --float32: float32 matrix products at full precision instead of TF32, as the "
                             "trainer runs by default (train.tf32 false) and bench_train.py without --tf32")
    args = parser.parse_args()
    if args.full_precision and not args.float32:
        parser.error("--full-precision applies to --float32 inputs: add --float32")
    if args.float32:
        global OURS_DTYPE
        OURS_DTYPE = torch.float32
        torch.set_float32_matmul_precision("highest" if args.full_precision else "high")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    if args.block_size < 2 or args.block_size % 2:
        parser.error(f"--block-size {args.block_size}: give an even number of tokens, e.g. 4 or 8")
    if args.chunk_size < 2 or args.chunk_size % args.block_size:
        parser.error(f"--chunk-size {args.chunk_size}: give a multiple of the block size "
                     f"({args.block_size}), e.g. 256 or 512")
    fused_recurrent.CHUNK_SIZE = args.chunk_size
    fused_recurrent.BLOCK_SIZE = args.block_size
    batches = (1,) if args.quick else (1, 4)
    shapes = [(b, length) for b in batches for length in (2048, 8192, 16384)]
    if args.shapes:
        try:
            shapes = [tuple(int(x) for x in item.lower().split("x")) for item in args.shapes.split(",")]
        except ValueError:
            shapes = []
        if not shapes or not all(len(shape) == 2 and min(shape) > 0 for shape in shapes):
            parser.error(f"--shapes {args.shapes!r}: give BxL items separated by commas, e.g. 4x8192,1x2048")
    if args.compare:
        print(f"{torch.cuda.get_device_name()}: backward configurations at B=1, L=8192, interleaved rounds")
        write_json(args.json, {"compare": compare()})
        return 0
    if args.profile:  # the first of --backends
        backend = next(b for b in args.backends.split(",") + ["triton"] if b)
        forward_backward = ours(scan_inputs(1, 2048), backend=backend)[1]
        forward_backward()
        torch.cuda.synchronize()
        return 0
    chunk_scan, state_update, note = load_mamba_ssm()
    backends = tuple(b for b in args.backends.split(",") if b)
    clock, clock_source = (args.clock_ghz, "--clock-ghz") if args.clock_ghz else sm_clock_ghz()
    info = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "backends": backends, "clock_ghz": clock, "clock_source": clock_source,
            "torch": torch.__version__, "triton": triton.__version__, "baseline": note,
            "copy_tbs": copy_bandwidth_tbs(), "fwd_config": fused_recurrent.FWD_CONFIG,
            "bwd_config": fused_recurrent.BWD_CONFIG,
            "bwd_config_b1": fused_recurrent._backward_config(1, HEADS, HEAD_DIM, torch.device("cuda")),
            "chunk_size": fused_recurrent.CHUNK_SIZE, "ours_dtype": str(OURS_DTYPE),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "block_size": fused_recurrent.BLOCK_SIZE, "rounds": args.rounds}
    print(f"{info['device']} ({info['date']}), torch {info['torch']}, triton {info['triton']}; {note}")
    print(f"device-to-device copy: {info['copy_tbs']:.2f} TB/s; SM clock {clock:.3f} GHz ({clock_source})")
    result = {"info": info}
    result["scan"] = bench_scans(shapes, chunk_scan, backends, clock,
                                 progress=lambda rows: write_json(args.json, {**result, "scan": rows}),
                                 rounds=args.rounds, graphs=args.graphs)
    write_json(args.json, result)
    result["step"] = [] if args.no_step else bench_steps((1, 16, 64), state_update)
    print_tables(result, chunk_scan is not None, state_update is not None, backends)
    write_json(args.json, result)
    if args.breakdown:
        print("\nthe chunk-parallel backward's launches (CUDA events, median of 5)")
        result["breakdown"] = breakdown(backends)
        write_json(args.json, result)
    if args.sweep:
        print("\nsweep of our kernels' tilings at B=1, L=8192 (defaults above)")
        result["sweep"] = sweep()
        write_json(args.json, result)
    return 0


def write_json(path: str | None, result: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def print_tables(result: dict, with_ssd: bool, with_step: bool, backends=("triton",)) -> None:
    """The side-by-side scan table (one line per backend and shape) and the decoding-step table."""
    base = "SSD" if with_ssd else "beta=None"
    products = "TF32" if torch.get_float32_matmul_precision() != "highest" else "full-precision"
    ours = "bf16" if OURS_DTYPE == torch.bfloat16 else f"ours float32 ({products} products), SSD bf16"
    rounds = result["info"].get("rounds", 1)
    timing = "do_bench medians" if rounds == 1 else f"medians of {rounds} rounds' do_bench medians"
    ratio = f"ours / {base}" if rounds == 1 else f"the median of the rounds' ours / {base}"
    print(f"\n{ours}, H={HEADS} P={HEAD_DIM} N={STATE} G=1; ms are {timing}; memory is peak extra GiB "
          f"(fwd+bwd); x = {ratio}; floor% = floor / ours (fwd: 1 MUFU per element-token; bwd = f+b - fwd: "
          f"{BWD_INSTRUCTIONS} instructions per element-token); gluon = Gluon forward + Triton backward, "
          "gluon-bwd = Gluon forward + Gluon backward")
    print(f"{'backend':>16} {'B':>2} {'L':>6} | {'fwd':>7} {base:>7} {'x':>5} {'floor%':>6} | {'f+b':>7} {base:>7} "
          f"{'x':>5} {'bwd':>7} {'floor%':>6} | {'GiB':>6} {base:>6} {'x':>5}")
    for r in result["scan"]:
        for b in backends:
            if f"{b}_fwd_ms" not in r:
                print(f"{b:>16} {r['B']:>2} {r['L']:>6} | failed: {r.get(f'{b}_error', '?')[:80]}")
                continue
            fwd, fb, gib = r[f"{b}_fwd_ms"], r[f"{b}_fwdbwd_ms"], r[f"{b}_peak_gib"]
            fwd_x = r.get(f"{b}_fwd_x", fwd / r["base_fwd_ms"])
            fb_x = r.get(f"{b}_fwdbwd_x", fb / r["base_fwdbwd_ms"])
            print(f"{b:>16} {r['B']:>2} {r['L']:>6} | {fwd:7.2f} {r['base_fwd_ms']:7.2f} {fwd_x:5.2f} "
                  f"{100 * r['floor_fwd_ms'] / fwd:5.0f}% | {fb:7.2f} {r['base_fwdbwd_ms']:7.2f} "
                  f"{fb_x:5.2f} {fb - fwd:7.2f} {100 * r['floor_bwd_ms'] / (fb - fwd):5.0f}% | "
                  f"{gib:6.3f} {r['base_peak_gib']:6.3f} {gib / max(r['base_peak_gib'], 1e-9):5.2f}")
    if any("base_fwd_graph_ms" in r for r in result["scan"]):
        print(f"\nreplayed from CUDA graphs (do_bench_cudagraph medians, one round): the GPU's time without Python's "
              f"launches; x = ours / {base}")
        print(f"{'backend':>16} {'B':>2} {'L':>6} | {'fwd':>7} {base:>7} {'x':>5} | {'f+b':>7} {base:>7} {'x':>5}")
        for r in result["scan"]:
            for b in backends:
                if f"{b}_fwd_graph_ms" not in r or "base_fwd_graph_ms" not in r:
                    why = r.get(f"{b}_graph_error") or r.get("base_graph_error") or r.get(f"{b}_error", "?")
                    print(f"{b:>16} {r['B']:>2} {r['L']:>6} | no graph timing: {why[:80]}")
                    continue
                fwd, fb = r[f"{b}_fwd_graph_ms"], r[f"{b}_fwdbwd_graph_ms"]
                base_fwd, base_fb = r["base_fwd_graph_ms"], r["base_fwdbwd_graph_ms"]
                print(f"{b:>16} {r['B']:>2} {r['L']:>6} | {fwd:7.2f} {base_fwd:7.2f} {fwd / base_fwd:5.2f} | "
                      f"{fb:7.2f} {base_fb:7.2f} {fb / base_fb:5.2f}")
    if not result["step"]:
        return
    step_base = "selective_state_update" if with_step else "torch step"
    print(f"\ndecoding step (us), Mamba2 = {step_base}; eager (with Python launch) and CUDA-graph replay; "
          "ratio = ours / Mamba2 with the same state dtype role (ours keeps M and I in float32)")
    print(f"{'B':>3} {'mode':>6} | {'ours':>7} | {'mamba2 f32':>10} {'ratio':>6} | {'mamba2 bf16':>11} {'ratio':>6}")
    for r in result["step"]:
        for mode, suffix in (("eager", "_us"), ("graph", "_graph_us")):
            ours_us = r["ours_step" + suffix]
            f32, bf16 = r["mamba2_step_f32state" + suffix], r["mamba2_step_bf16state" + suffix]
            print(f"{r['B']:>3} {mode:>6} | {ours_us:7.1f} | {f32:10.1f} {ours_us / f32:6.2f} | {bf16:11.1f} "
                  f"{ours_us / bf16:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
