"""Why the upgraded 64-layer model's fine-tuning steps vary (call 4: 1.66-2.02 s a step within one round, the plain
model's 1.005-1.036): bench_train.py's upgraded model (2.7b shapes, all 64 layers upgraded, L = 8192, bf16, TF32,
activation checkpointing as the trainer sets it up), its steps timed three ways at once: the host's time to issue the
step (to just before the synchronization), the step's wall time, and the chunk-parallel backward's launches (local
pass, carry, corrections: CUDA events, summed over the step's 64 layers). Steps run in the ``--modes`` given: Python's
garbage collector as it is (gc on), disabled (gc off), or with every object made so far frozen out of its generations
(gc frozen: gc.collect, then gc.freeze); each line also counts the collections of each generation
during the step. A host that issues the step in about its wall time is what the GPU waits on; a backward whose launches
vary with the wall time is the kernels.

    python docs/bench/pipea-2026-11-29/time_steps.py [--steps 6] [--upgraded 64]
    python docs/bench/pipea-2026-11-29/time_steps.py --steps 3 --upgraded 0 --profile 30   # and the plain model's

``--profile N`` then runs one more step under torch.profiler (the sum of its GPU kernels' times against its wall time:
how long the GPU idles) and one under cProfile (the N Python functions that took the most host time, by their own
time and with what they call).
"""

import argparse
import gc
import sys
import time
from pathlib import Path

import torch
from palimpsa.kernels import chunked_bwd
from palimpsa.upgrade import PalimpsaConfig
from palimpsa.upgrade.convert.surgery import spread_layers

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--upgraded", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--modes", default="gc on,gc off,gc on")
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.upgraded, 64) if args.upgraded else []
    model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=layers, beta_init=1e-3),
                  "cuda", torch.bfloat16)
    optimizer = prepare(model, layers or spread_layers(64, 64))  # (the plain model trains every mixer too)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq_len), device="cuda")

    def step():
        chunked_bwd.TIMINGS = []
        counts = [s["collections"] for s in gc.get_stats()]
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        issued = time.perf_counter() - start
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        kernels = {}
        for name, begin, end in chunked_bwd.TIMINGS:
            kernels[name] = kernels.get(name, 0.0) + begin.elapsed_time(end) / 1e3
        chunked_bwd.TIMINGS = None
        runs = [s["collections"] - c for s, c in zip(gc.get_stats(), counts, strict=True)]
        return issued, wall, kernels, runs

    for _ in range(2):  # compilation, autotuning
        step()
    for mode in args.modes.split(","):
        gc.disable() if mode == "gc off" else gc.enable()
        if mode == "gc frozen":  # every object so far out of the collector's generations (gc.freeze)
            gc.collect()
            gc.freeze()
        for index in range(args.steps):
            issued, wall, kernels, runs = step()
            parts = ", ".join(f"{name} {seconds:.3f}" for name, seconds in kernels.items())
            print(f"{mode} step {index}: wall {wall:.3f} s, issued in {issued:.3f} s; backward launches: {parts} s; "
                  f"collections by generation {runs}", flush=True)
    gc.enable()
    if args.profile:
        profile(step, args.profile)


def profile(step, top: int) -> None:
    """One step under torch.profiler (its GPU kernels' total time against its wall time) and one under cProfile (the
    ``top`` functions by their own host time, then by the time with what they call)."""
    import cProfile
    import pstats

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        _, wall, _, _ = step()
    busy = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == DeviceType.CUDA) / 1e6
    print(f"profiled step: wall {wall:.3f} s, GPU kernels {busy:.3f} s ({busy / wall:.0%} of it)", flush=True)
    host = cProfile.Profile()
    host.enable()
    _, wall, _, _ = step()
    host.disable()
    print(f"step under cProfile: wall {wall:.3f} s", flush=True)
    stats = pstats.Stats(host, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    main()
