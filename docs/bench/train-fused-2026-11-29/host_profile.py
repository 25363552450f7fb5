"""Where the host's time goes in a fine-tuning step (2.7b shapes, L = 8192, bf16, TF32, 8 layers trained as in
``bench_train.py``): the plain model and the one with those 8 layers upgraded, 3 steps each under cProfile after 3
warm-up steps, the functions with the most time of their own and the most time under them. cProfile slows every
Python call, so the shares, not the times, are the result; each model's steps are also timed without it. Run from
the repository root: ``python3 docs/bench/train-fused-2026-11-29/host_profile.py``."""

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def main() -> None:
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(8, 64)
    for label, upgraded in (("plain", []), ("upgraded", layers)):
        model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=upgraded,
                                     beta_init=1e-3), "cuda", torch.bfloat16)
        optimizer = prepare(model, layers)
        ids = torch.randint(0, 50288, (1, 8192), device="cuda")

        def step(model=model, optimizer=optimizer, ids=ids):
            loss = model(ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()

        for _ in range(3):
            step()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        for _ in range(3):
            step()
        profiler.disable()
        profiled = (time.perf_counter() - start) / 3
        print(f"\n{label}: steps {', '.join(f'{t:.3f}' for t in times)} s; under cProfile {profiled:.3f} s a step")
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(45)
            lines = text.getvalue().splitlines()
            start_row = next(i for i, line in enumerate(lines) if "ncalls" in line)
            print(f"-- {label}, by {key} (3 steps) --")
            for line in lines[start_row:start_row + 46]:
                print(line[:200])
        del model, optimizer, step
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
