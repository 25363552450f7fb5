"""The chunk-parallel forward with variants of its chunk walk, timed against each other in interleaved rounds in one
process, with each variant's ``y`` compared with the default's: ``--variant NAME=KEY=VAL:KEY=VAL`` (repeatable;
``chunked_fwd.CHUNKED_FWD_CONFIG``'s keys, e.g. ``walk_PAIR=1``; ``NAME=`` alone is the default), ``--shapes BxL``
(2.7b shapes: 80 heads, P = 64, N = 128, one group), ``--float32`` (float32 inputs, TF32 products). Each round
times every variant's forward (no gradient; CUDA events, median of ``triton.testing.do_bench``) in an order that
turns each round; prints the per-round times, then per variant the median over rounds and its ratio to the first
variant. Run from the repository root: ``python3 docs/bench/pair-walk-2026-11-28/walk_ab.py --variant base=
--variant pair=walk_PAIR=1``."""

import argparse
import os
import statistics
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import bench_scan  # noqa: E402
from palimpsa.kernels import fused_recurrent  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=KEY=VAL:...")
    parser.add_argument("--shapes", default="1x8192")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--float32", action="store_true")
    args = parser.parse_args()
    if args.float32:
        bench_scan.OURS_DTYPE = torch.float32
        torch.set_float32_matmul_precision("high")
    variants = []
    for item in args.variant:
        name, _, keys = item.partition("=")
        variants.append((name, {"kernel": "chunked", **bench_scan.config_keys(keys)}))
    for shape in args.shapes.split(","):
        batch, length = (int(x) for x in shape.split("x"))
        inputs = bench_scan.scan_inputs(batch, length)

        def forward(config, inputs=inputs):
            with torch.no_grad():
                return fused_recurrent.fused_recurrent_palimpsa_scan(
                    inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 1.0, None, False,
                    False, fwd_config=config, bwd_config=None)[0]

        want = forward(variants[0][1]).float()
        for name, config in variants:
            got = forward(config).float()
            err = ((got - want).norm() / want.norm()).item()
            print(f"B={batch} L={length} {name}: y against {variants[0][0]} {err:.2e}, finite "
                  f"{bool(torch.isfinite(got).all())}", flush=True)
        times = {name: [] for name, _ in variants}
        for r in range(args.rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name, config in order:
                times[name].append(do_bench(lambda c=config: forward(c), warmup=25, rep=200, return_mode="median"))
            print(f"B={batch} L={length} round {r}: " + "  ".join(f"{n} {times[n][-1]:.3f}" for n, _ in variants),
                  flush=True)
        first = statistics.median(times[variants[0][0]])
        for name, _ in variants:
            med = statistics.median(times[name])
            print(f"B={batch} L={length} {'float32' if args.float32 else 'bf16'} {name:>12}: {med:.3f} ms  "
                  f"({med / first:.3f} of {variants[0][0]}; rounds {min(times[name]):.3f}-{max(times[name]):.3f})",
                  flush=True)


if __name__ == "__main__":
    main()
