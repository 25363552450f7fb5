"""Why some fine-tuning steps of the upgraded 64-layer model take 1.80 s and others 1.65 s
(docs/bench/rounds-2026-11-29, call 3: one round's five steps all 1.652-1.663 s, another's 1.652-1.901):
bench_train.py's upgraded model (2.7b shapes,
all 64 layers upgraded, L = 8192, bf16, TF32, activation checkpointing as the trainer sets it up, the objects made
before training frozen out of the garbage collector as the trainer does), ``--steps`` steps each under its own
torch.profiler window after two warm-up steps. For each step: its wall time, the sum of its CUDA kernels' times, the
idle time between kernels (and the largest gap with the kernels on either side), and, against the fastest step, the
kernel names whose summed time grew the most. So a slow step shows whether it waited (gaps) or computed slower (which
kernels). Run from the repository root: ``python3 docs/bench/step-spread-2026-11-29/profile_steps.py [--steps 8]``."""

import argparse
import gc
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--upgraded", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=8192)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.upgraded, 64)
    model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=layers, beta_init=1e-3),
                  "cuda", torch.bfloat16)
    optimizer = prepare(model, layers)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq_len), device="cuda")

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):  # compilation, autotuning
        step()
    torch.cuda.synchronize()
    gc.collect()
    gc.freeze()
    steps = []
    for index in range(args.steps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            wall = time.perf_counter() - start
        kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        by_name = {}
        for e in kernels:
            name = e.name[:70]
            by_name[name] = by_name.get(name, 0.0) + e.time_range.elapsed_us() / 1e6
        gaps, end = [], kernels[0].time_range.end
        for before, after in zip(kernels, kernels[1:]):
            end = max(end, before.time_range.end)
            if after.time_range.start > end:
                gaps.append(((after.time_range.start - end) / 1e6, before.name[:50], after.name[:50]))
        busy = sum(by_name.values())
        idle = sum(g[0] for g in gaps)
        top = max(gaps) if gaps else (0.0, "", "")
        print(f"step {index}: wall {wall:.3f} s, kernels {busy:.3f} s ({len(kernels)}), idle between kernels "
              f"{idle:.3f} s ({sum(g[0] > 1e-3 for g in gaps)} gaps over 1 ms; largest {top[0] * 1e3:.1f} ms after "
              f"{top[1]} before {top[2]})", flush=True)
        steps.append((wall, busy, by_name))
    gc.unfreeze()
    fastest = min(steps, key=lambda s: s[0])
    for index, (wall, busy, by_name) in enumerate(steps):
        if wall - fastest[0] < 0.02:
            continue
        grown = sorted(((t - fastest[2].get(n, 0.0), n) for n, t in by_name.items()), reverse=True)[:6]
        print(f"step {index} ({wall:.3f} s) against the fastest ({fastest[0]:.3f} s): kernels "
              f"{busy - fastest[1]:+.3f} s; grown most: "
              + "; ".join(f"{n} {d * 1e3:+.1f} ms" for d, n in grown), flush=True)


if __name__ == "__main__":
    main()
