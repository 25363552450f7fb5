"""The CUDA local pass's variants side by side, B = 1, L = 8192, 2.7b shapes, bf16 and fine-tuning's mix (float32
values, gains and output gradients, bf16 keys and queries, TF32 allowed), log decays as bench_scan.py draws them:
timing macros (the config's CUDA_DEFINES) and timing probes (CUDA_PROBE: parts left out, wrong gradients). The
chunk-parallel backward's launches timed by CUDA events (chunked_bwd.TIMINGS), interleaved rounds, medians, and the
gradients' largest relative difference from the first variant (meaningful for the macros only).

    python docs/bench/hsum-2026-11-29/time_probes.py [--variants "0:,0:SSPLIT=1,2:,16:,32:"] [--rounds 6]

A variant is ``PROBE:DEFINES``.
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
from palimpsa.kernels import chunked_bwd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peel-2026-11-29"))
from time_tsub import inputs, local_pass  # noqa: E402  (the peel record's inputs and timed pass)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="0:,0:SSPLIT=1,2:,16:,32:")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    variants = [(int(p), d) for p, _, d in (v.partition(":") for v in args.variants.split(","))]
    torch.set_float32_matmul_precision("high")
    for kind in ("bf16", "mix"):
        leaves, dy = inputs(kind, "dt*a")
        times = {v: [] for v in variants}
        grads = {}
        for r in range(args.rounds):
            for probe, defines in variants:
                local, grad = local_pass(leaves, dy, {"LOCAL": "cuda", "CUDA_PROBE": probe, "CUDA_DEFINES": defines})
                if r:  # the first round compiles
                    times[(probe, defines)] += local
                else:
                    grads[(probe, defines)] = grad
        base = grads[variants[0]]
        for (probe, defines), ms in times.items():
            diff = max(((a - b).norm() / b.norm()).item() for a, b in zip(grads[(probe, defines)], base, strict=True))
            name = defines or "(default macros)"
            print(f"{kind:4} PROBE {probe:2} {name:18}: local pass {statistics.median(ms):.2f} ms (median of "
                  f"{len(ms)}), gradients {diff:.1e} from the first", flush=True)
    for key in ("LOCAL", "CUDA_PROBE", "CUDA_DEFINES"):
        chunked_bwd.CHUNKED_CONFIG.pop(key)


if __name__ == "__main__":
    main()
