"""A fine-tuning step with the host taken out (prepared on the CPU, not yet run on a GPU): the whole step (forward,
backward with its recompute, AdamW) captured once as a CUDA graph and replayed, against the same step run eagerly, for
the plain model and the one with ``--upgraded`` layers upgraded (2.7b shapes, L = 8192, bf16, TF32, checkpointing as
``bench_train.py`` sets it up). With the block's elementwise work fused, the plain model's eager steps are set by the
host's launches; a replayed graph launches nothing from Python, so its step time is the kernels' and the ratio of the
two models' graphed steps is the tokens/s ratio on a host that never leaves the GPU idle (``bench_train.py
--profile``'s ``kernel_time_ratio`` estimates it from a profile). A capture that fails prints why (a host sync or an
allocation the graph cannot hold) and the script goes on to the next model. Run from the repository root:
``python3 docs/bench/train-fused-2026-11-29/graph_step.py [--upgraded 8]``."""

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def timed(fn, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def run(label: str, upgraded: list[int], layers: list[int], seq_len: int, steps: int) -> dict:
    model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=upgraded,
                                 beta_init=1e-3), "cuda", torch.bfloat16)
    prepare(model, layers)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-5, capturable=True)  # (its step count on the GPU)
    ids = torch.randint(0, 50288, (1, seq_len), device="cuda")
    holder = {}

    def step():
        optimizer.zero_grad(set_to_none=True)
        holder["loss"] = model(ids, labels=ids).loss
        holder["loss"].backward()
        optimizer.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as a capture wants: compiles, autotuning
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager = timed(step, steps)
    result = {"eager_s": statistics.median(eager), "eager_steps_s": eager}
    try:
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            holder["loss"] = model(ids, labels=ids).loss
            holder["loss"].backward()
            optimizer.step()
        torch.cuda.synchronize()
        replayed = timed(graph.replay, steps)
        result.update(graph_s=statistics.median(replayed), graph_steps_s=replayed,
                      loss_after=holder["loss"].item())
    except Exception as error:  # report what broke the capture, then go on
        result["graph_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    print(f"{label}: eager {result['eager_s']:.3f} s a step ({', '.join(f'{t:.3f}' for t in eager)})"
          + (f"; graphed {result['graph_s']:.3f} s ({', '.join(f'{t:.3f}' for t in result['graph_steps_s'])})"
             if "graph_s" in result else f"; capture failed: {result['graph_error']}"), flush=True)
    holder.clear()
    return result  # (the model, optimizer and graph freed with this call's frame)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgraded", type=int, default=8, help="layers upgraded of the 64 (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.upgraded, 64)
    plain = run("plain", [], layers, args.seq_len, args.steps)
    gc.collect()
    torch.cuda.empty_cache()
    upgraded = run(f"{args.upgraded} layers upgraded", layers, layers, args.seq_len, args.steps)
    print(f"eager ratio {plain['eager_s'] / upgraded['eager_s']:.3f}" + (
        f", graphed ratio {plain['graph_s'] / upgraded['graph_s']:.3f}"
        if "graph_s" in plain and "graph_s" in upgraded else ""))


if __name__ == "__main__":
    main()
