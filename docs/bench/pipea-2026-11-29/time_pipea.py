"""The backward's CUDA local pass with pass A pipelined (the source's timing macro PIPEA 1: a segment's copies asked
for two segments ahead into one of two buffers, its inputs widened while the segment before walks, one barrier a
segment) against the default build (PIPEA 0: a stage of two barriers a segment), B = 1, L = 8192, 2.7b shapes, bf16 and
fine-tuning's mix (float32 values, gains and output gradients, bf16 keys and queries, TF32 allowed), log decays as
bench_scan.py draws them. The chunk-parallel backward's launches timed by CUDA events (chunked_bwd.TIMINGS),
interleaved rounds, medians; and each gradient's largest relative difference from PIPEA 0's. Pass A computes the same
states by the same operations in both, so the values' and gains' gradients should match bit for bit; dk, dq and the
decay gradient come from atomics whose order varies.

    python docs/bench/pipea-2026-11-29/time_pipea.py [--rounds 6] [--variants ",PIPEA=1"]

A variant is the CUDA pass's CUDA_DEFINES, optionally with ``@`` and its CUDA_PROBE bits (``PIPEA=1@8``: no pass A;
probes give wrong gradients, so gradients are compared only between variants without one).
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
from palimpsa.kernels import chunked_bwd, palimpsa_scan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peel-2026-11-29"))
from time_tsub import inputs  # noqa: E402  (the peel record's inputs)

NAMES = ("v", "k", "q", "log_decay", "beta")


def backward(leaves, dy, defines: str) -> tuple[dict, list]:
    """One forward and backward with the CUDA local pass built with ``defines``: the launches' times (ms) and the
    leaves' gradients."""
    defines, _, probe = defines.partition("@")
    chunked_bwd.CHUNKED_CONFIG.update({"LOCAL": "cuda", "CORRECT": "cuda", "CUDA_DEFINES": defines,
                                       "CUDA_PROBE": int(probe or 0)})
    for x in leaves:
        x.grad = None
    y, _, _ = palimpsa_scan(*leaves, importance_prior=1.0)
    chunked_bwd.TIMINGS = []
    before = dict(chunked_bwd.LOCAL_RUNS)
    y.backward(dy)
    torch.cuda.synchronize()
    assert chunked_bwd.LOCAL_RUNS["cuda"] > before["cuda"]  # (LOCAL "cuda" raises rather than fall back)
    times = {}
    for name, start, end in chunked_bwd.TIMINGS:
        times[name] = times.get(name, 0.0) + start.elapsed_time(end)
    chunked_bwd.TIMINGS = None
    return times, [x.grad.float().clone() for x in leaves]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--variants", default=",PIPEA=1", help="comma-separated CUDA_DEFINES, the first the reference")
    args = parser.parse_args()
    variants = args.variants.split(",")
    torch.set_float32_matmul_precision("high")
    for kind in ("bf16", "mix"):
        leaves, dy = inputs(kind, "dt*a")
        times = {d: {} for d in variants}
        grads = {}
        for r in range(args.rounds + 1):
            for defines in variants:
                got, grad = backward(leaves, dy, defines)
                if r:  # the first round compiles
                    for name, ms in got.items():
                        times[defines].setdefault(name, []).append(ms)
                else:
                    grads[defines] = grad
        for defines in variants:
            parts = ", ".join(f"{name} {statistics.median(ms):.3f}" for name, ms in times[defines].items())
            print(f"{kind} [{defines or 'default'}]: {parts} ms (medians of {args.rounds})", flush=True)
        for defines in variants[1:]:
            if "@" in defines or "@" in variants[0]:
                continue
            diffs = []
            for name, a, b in zip(NAMES, grads[defines], grads[variants[0]], strict=True):
                same = torch.equal(a, b)
                diffs.append(f"{name} {'equal' if same else f'{((a - b).norm() / b.norm()).item():.1e}'}")
            print(f"{kind} gradients of [{defines}] against [{variants[0] or 'default'}]: {', '.join(diffs)}",
                  flush=True)
    chunked_bwd.CHUNKED_CONFIG.update({"CUDA_DEFINES": "", "CUDA_PROBE": 0})


if __name__ == "__main__":
    main()
