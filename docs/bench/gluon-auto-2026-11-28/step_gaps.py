"""Where a fine-tuning step's GPU stands idle: one profiled step (after two warm-up steps) of bench_train.py's model
(2.7b shapes, ``--upgraded`` layers, L = 8192, bf16, TF32, activation checkpointing), its CUDA kernels in start
order, and every gap between one kernel's end and the next one's start. Prints the step's wall time, the kernels'
sum, the gaps' sum, and the largest gaps with the kernels on either side; then the host's CUDA runtime calls by
total time (a cudaMalloc, cudaFree or synchronisation in the step would show there), the caching allocator's
counters over the step, and the host time of each scan backward and of each Gluon local-pass selection and
launch. ``PALIMPSA_CHUNKED_LOCAL`` picks the backward's local pass. Run from the repository root:
``PALIMPSA_CHUNKED_LOCAL=auto python3 docs/bench/gluon-auto-2026-11-28/step_gaps.py --upgraded 8``."""

import argparse
import os
import sys
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.kernels import chunked_bwd  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgraded", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.upgraded, 64)
    config = PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=layers, beta_init=1e-3)
    model = build(config, "cuda", torch.bfloat16)
    optimizer = prepare(model, layers)
    ids = torch.randint(0, config.vocab_size, (1, args.seq_len), device="cuda")

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    for _ in range(2):
        step()
    host_ms = {"_gluon_local": [], "chunked_backward": []}

    def timed(name):
        real = getattr(chunked_bwd, name)

        def call(*a, **kw):
            t0 = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                host_ms[name].append((time.perf_counter() - t0) * 1e3)
        setattr(chunked_bwd, name, call)

    for name in host_ms:
        timed(name)
    runs = dict(chunked_bwd.LOCAL_RUNS)
    mem0 = torch.cuda.memory_stats()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        step()
        wall_ms = (time.perf_counter() - start) * 1e3
    mem1 = torch.cuda.memory_stats()
    ran = {k: n - runs.get(k, 0) for k, n in chunked_bwd.LOCAL_RUNS.items() if n > runs.get(k, 0)}
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    busy = sum(e.time_range.elapsed_us() for e in kernels) / 1e3
    gaps = []
    end = kernels[0].time_range.end
    for before, after in zip(kernels, kernels[1:]):
        end = max(end, before.time_range.end)
        if after.time_range.start > end:
            gaps.append((after.time_range.start - end, before.name, after.name))
    print(f"local passes {ran}; step {wall_ms:.1f} ms under the profiler; {len(kernels)} kernels, {busy:.1f} ms; "
          f"gaps {sum(g[0] for g in gaps) / 1e3:.1f} ms ({len(gaps)}), over 100 us: "
          f"{sum(g[0] for g in gaps if g[0] > 100) / 1e3:.1f} ms ({sum(g[0] > 100 for g in gaps)})")
    for gap, before, after in sorted(gaps, reverse=True)[:args.top]:
        print(f"  {gap / 1e3:7.2f} ms  after {before[:60]}  before {after[:60]}")
    calls = {}
    for e in prof.events():
        if e.device_type == DeviceType.CPU and e.name.startswith("cu"):
            n, us = calls.get(e.name, (0, 0))
            calls[e.name] = (n + 1, us + e.time_range.elapsed_us())
    print("host CUDA runtime calls by total time:")
    for name, (n, us) in sorted(calls.items(), key=lambda c: -c[1][1])[:args.top]:
        print(f"  {name[:40]:40s} {n:6d} calls {us / 1e3:8.2f} ms")
    keys = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams", "num_ooms")
    print("allocator over the step: " + ", ".join(f"{k} {mem1.get(k, 0) - mem0.get(k, 0)}" for k in keys)
          + f"; reserved {mem1.get('reserved_bytes.all.current', 0) / 2**30:.2f} GiB")
    for name, ms in host_ms.items():
        print(f"host ms in chunked_bwd.{name} (each call): " + ", ".join(f"{t:.2f}" for t in ms))


if __name__ == "__main__":
    main()
