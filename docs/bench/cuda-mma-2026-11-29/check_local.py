"""The CUDA local pass of the chunk-parallel backward (kernels/cuda_local.py, tensor-core state updates) against float64
and against the Gluon pass, on a GPU: check_scan_gpu.py's cases and measures, with the chunk-parallel backward forced
and its local pass named (LOCAL cuda, then gluon), in bf16 and fp16, with packed sequences, two groups, states in and
out, and head dimension 128, and float32 inputs with TF32 allowed (torch.set_float32_matmul_precision "high", where the
CUDA pass takes float32; tolerance 1e-3: its products, and the forward's and the corrections', run in TF32), also with
bf16 keys and queries beside float32 values as an upgraded layer in fine-tuning has them. Prints each case's relative
errors, which local passes ran, and the largest relative difference between the two passes' gradients. (The record
cuda-local-2026-11-29 runs it on its first five cases.) With ``--correct`` it checks the corrections instead: the CUDA
local pass followed by the CUDA corrections (kernels/cuda_correct.py, CORRECT cuda), then against the Triton corrections
(CORRECT triton; docs/bench/cuda-correct-2026-11-29).

    python docs/bench/cuda-mma-2026-11-29/check_local.py [--quick] [--correct] [--gluon] [--tsub 0] [--defines FAC=0]
        [--cases 0,2]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import check_scan_gpu as c  # noqa: E402
from palimpsa.kernels import chunked_bwd, fused_recurrent  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4096 tokens instead of 16384 in the long case")
    parser.add_argument("--cases", default="", help="comma-separated case numbers (from 0) to run; all by default")
    parser.add_argument("--correct", action="store_true",
                        help="check the CUDA corrections (after the CUDA local pass) against the Triton corrections")
    parser.add_argument("--gluon", action="store_true",
                        help="check the Gluon local pass against float64 (and then against the CUDA pass) instead")
    parser.add_argument("--tsub", type=float, default=None,
                        help="the CUDA pass's peeling threshold (its CUDA_TSUB; 0: every token's state from a product)")
    parser.add_argument("--defines", default="",
                        help="timing macros of the CUDA pass (its CUDA_DEFINES, e.g. FAC=0)")
    args = parser.parse_args()
    if args.tsub is not None:
        chunked_bwd.CHUNKED_CONFIG["CUDA_TSUB"] = args.tsub
    if args.defines:
        chunked_bwd.CHUNKED_CONFIG["CUDA_DEFINES"] = args.defines
    key, tested, other = ("CORRECT", "cuda", "triton") if args.correct else ("LOCAL", "cuda", "gluon")
    if args.gluon:
        tested, other = other, tested
    os.environ[fused_recurrent.BACKWARD_ENV] = "chunked"
    fused_recurrent.POISON_OUTPUTS = True
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    long = 4096 if args.quick else 16384
    bounds = torch.tensor([0, 1000, 1001, 3003, 4096], dtype=torch.int32, device="cuda")
    cases = [  # name, make_inputs arguments, tolerance, prior, cu_seqlens, head dim
        (f"B1 L{long} G1 bf16 beta", dict(batch=1, length=long, groups=1, dtype=bf16, with_state=False, seed=3),
         1e-2, 1.0, None, 64),
        ("B2 L4096 G2 bf16 beta state", dict(batch=2, length=4096, groups=2, dtype=bf16, seed=4), 1e-2, 0.7, None,
         64),
        ("varlen 1000/1/2002/1093 G2 bf16 state", dict(batch=1, length=4096, groups=2, dtype=bf16, n_states=4,
                                                      seed=6), 1e-2, 0.7, bounds, 64),
        ("B1 L2048 G1 fp16 beta state", dict(batch=1, length=2048, groups=1, dtype=f16, seed=8), 1e-2, 1.0, None, 64),
        ("B1 L1000 G1 bf16 P128 state", dict(batch=1, length=1000, groups=1, dtype=bf16, seed=9), 1e-2, 1.0, None,
         128),
        ("B1 L2048 G2 f32 TF32 beta state", dict(batch=1, length=2048, groups=2, dtype=f32, seed=10), 1e-3, 0.7,
         None, 64),
        # 2e-3: dk, dq within 1.4e-3 and 1.7e-3 with either local pass (docs/bench/cuda-correct-2026-11-29, call 2)
        ("B1 L4096 G1 f32 v, bf16 k q, TF32 state", dict(batch=1, length=4096, groups=1, dtype=f32, seed=11,
                                                         key_dtype=bf16), 2e-3, 1.0, None, 64),
    ]
    if args.cases:
        cases = [cases[int(i)] for i in args.cases.split(",")]
    failed = 0
    for name, make, tol, prior, cu_seqlens, head_dim in cases:
        c.HEAD_DIM = head_dim
        torch.set_float32_matmul_precision("high" if make["dtype"] == f32 else "highest")
        key_dtype = make.pop("key_dtype", None)
        inputs = c.make_inputs(make.pop("batch"), make.pop("length"), make.pop("groups"), make.pop("dtype"), **make)
        if key_dtype is not None:  # as an upgraded layer in fine-tuning feeds the scan
            inputs["k"], inputs["q"] = inputs["k"].to(key_dtype), inputs["q"].to(key_dtype)
        grads = {}
        chunked_bwd.CHUNKED_CONFIG["NSPLIT"] = 2  # split: the chunk-parallel path whatever the batch
        chunked_bwd.CHUNKED_CONFIG["LOCAL"] = "cuda"
        chunked_bwd.CHUNKED_CONFIG[key] = tested
        before, corrections = dict(chunked_bwd.LOCAL_RUNS), dict(chunked_bwd.CORRECT_RUNS)
        try:
            rows = c.check_case(name, inputs, tol, prior, cu_seqlens, False, "triton", False)
        except Exception as error:  # noqa: BLE001 - report and go on
            print(f"ERROR {name}: {type(error).__name__}: {error}")
            failed += 1
            continue
        for case, label, _ref, err, t, ok in rows:
            print(f"{case:44s} {label:11s} {err:10.2e} {t:7.0e}  {'yes' if ok else 'NO'}", flush=True)
            failed += not ok
        print(f"  local passes run: {chunked_bwd.local_runs_since(before)}, corrections run: "
              f"{ {n: r - corrections[n] for n, r in chunked_bwd.CORRECT_RUNS.items() if r > corrections[n]} }")
        gen = torch.Generator(device="cuda").manual_seed(7)
        weights = [torch.randn(s, generator=gen, device="cuda", dtype=torch.float64)
                   for s in c.shapes_of(inputs, cu_seqlens)[:3]]
        for which in (tested, other):
            chunked_bwd.CHUNKED_CONFIG[key] = which
            _, grads[which] = c.outputs_and_grads(
                inputs, lambda x, p=prior, s=cu_seqlens: c.run_op(x, "triton", p, s, False), weights)
        for label in grads[tested]:
            print(f"  {tested} vs {other} {key} d{label}: "
                  f"{c.relative_error(grads[tested][label], grads[other][label]):.2e}")
        chunked_bwd.CHUNKED_CONFIG[key] = chunked_bwd._SHIPPED[key]
        torch.cuda.empty_cache()
    print(f"\n{failed} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
