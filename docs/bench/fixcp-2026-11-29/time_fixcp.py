"""The backward's CUDA local pass and corrections with each thread's copies at fixed offsets (the source's FIXCP 1:
loops of known trip count) against the form checked on a GPU (FIXCP 0), B = 1, L = 8192, 2.7b shapes, bf16 and
fine-tuning's mix (float32 values, gains and output gradients, bf16 keys and queries, TF32 allowed), log decays as
bench_scan.py draws them. The chunk-parallel backward's launches timed by CUDA events (chunked_bwd.TIMINGS),
interleaved rounds, medians; and each gradient's largest relative difference from FIXCP 0's. The copies move the
same bytes to the same places, so the gradients should differ only where atomics add in another order (dk, dq and
the decay gradient): the values' and gains' gradients should match bit for bit.

    python docs/bench/fixcp-2026-11-29/time_fixcp.py [--rounds 6]
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
from palimpsa.kernels import chunked_bwd, cuda_correct, palimpsa_scan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peel-2026-11-29"))
from time_tsub import inputs  # noqa: E402  (the peel record's inputs)

NAMES = ("v", "k", "q", "log_decay", "beta")


def backward(leaves, dy, fixcp: int) -> tuple[dict, list]:
    """One forward and backward with both kernels' FIXCP set: the launches' times (ms) and the leaves' gradients."""
    chunked_bwd.CHUNKED_CONFIG.update({"LOCAL": "cuda", "CORRECT": "cuda", "CUDA_DEFINES": f"FIXCP={fixcp}"})
    cuda_correct.FIXCP = fixcp
    for x in leaves:
        x.grad = None
    y, _, _ = palimpsa_scan(*leaves, importance_prior=1.0)
    chunked_bwd.TIMINGS = []
    local, corrections = dict(chunked_bwd.LOCAL_RUNS), dict(chunked_bwd.CORRECT_RUNS)
    y.backward(dy)
    torch.cuda.synchronize()
    # both CUDA kernels ran (LOCAL and CORRECT "cuda" raise rather than fall back to Triton)
    assert chunked_bwd.LOCAL_RUNS["cuda"] > local["cuda"] and chunked_bwd.CORRECT_RUNS["cuda"] > corrections["cuda"]
    times = {}
    for name, start, end in chunked_bwd.TIMINGS:
        times[name] = times.get(name, 0.0) + start.elapsed_time(end)
    chunked_bwd.TIMINGS = None
    return times, [x.grad.float().clone() for x in leaves]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    for kind in ("bf16", "mix"):
        leaves, dy = inputs(kind, "dt*a")
        times = {0: {}, 1: {}}
        grads = {}
        for r in range(args.rounds + 1):
            for fixcp in (0, 1):
                got, grad = backward(leaves, dy, fixcp)
                if r:  # the first round compiles
                    for name, ms in got.items():
                        times[fixcp].setdefault(name, []).append(ms)
                else:
                    grads[fixcp] = grad
        for fixcp in (0, 1):
            parts = ", ".join(f"{name} {statistics.median(ms):.3f}" for name, ms in times[fixcp].items())
            print(f"{kind} FIXCP={fixcp}: {parts} ms (medians of {args.rounds})", flush=True)
        diffs = []
        for name, a, b in zip(NAMES, grads[1], grads[0], strict=True):
            same = torch.equal(a, b)
            diffs.append(f"{name} {'equal' if same else f'{((a - b).norm() / b.norm()).item():.1e}'}")
        print(f"{kind} gradients of FIXCP=1 against FIXCP=0: {', '.join(diffs)}", flush=True)
    chunked_bwd.CHUNKED_CONFIG.update({"CUDA_DEFINES": ""})
    cuda_correct.FIXCP = 0


if __name__ == "__main__":
    main()
