"""Compile the Gluon scan kernels for sm_90a without a GPU and report their registers, spills and loop SASS.

``triton.compile`` with a GPU target needs no driver; ``cuobjdump`` and ``nvdisasm`` ship inside the Triton wheel.
Prints one line per launch variant (registers, local memory, shared memory; for the forward the SASS instructions
per state element and token in the token loop's main path, MUFU / SHFL / LDG per token and the renormalising
branch's size; for the backward the same of its recompute step, the innermost loop) and writes the
numbers as JSON with ``--json`` (``-`` for stdout, which the CPU tests read). Run it under each Triton version to
be supported (docs/kernels.md); TRITON_INTERPRET must be unset (the interpreter replaces Gluon's library).

    python scripts/inspect_gluon_scan.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

EVERY_OPTION = {"dtype": "fp32", "groups": 2, "state_size": 64, "use_initial_state": True,
                "use_initial_importance": True, "is_varlen": True}
VARIANTS = {  # name: (kernel, compile options); the training launches are bf16 with beta at 2.7b shapes
    "training-bf16": ("forward", {}),
    "every-option-fp32-N64": ("forward", {**EVERY_OPTION, "store_final_state": True, "use_uncertainty": True}),
    "bwd-training-bf16": ("backward", {}),
    "bwd-every-option-fp32-N64": ("backward", {**EVERY_OPTION, "use_final_state_gradient": True, "use_du": True}),
}


def inspect(kernel: str, options: dict) -> dict:
    from palimpsa.kernels import gluon_scan

    state_size = options.get("state_size", 128)
    if kernel == "forward":
        compiled = gluon_scan.compile_forward(**options)
        elements = 2 * state_size // 8  # per thread and token: 2 channels x N / 8 states
    else:
        compiled = gluon_scan.compile_backward(**options)
        elements = 2 * state_size // 16  # per thread and token: 2 channels x N / 16 states
    loop = gluon_scan.loop_instructions(compiled, tokens=2 if kernel == "forward" else 1)
    per_token = {name: loop["opcodes"].get(name, 0) / loop["tokens"] for name in ("MUFU", "SHFL", "LDG", "BAR")}
    return {**gluon_scan.resource_usage(compiled), "target": "sm_90a" if ".target sm_90a" in compiled.asm["ptx"]
            else "?", "instructions_per_element": sum(loop["opcodes"].values()) / loop["tokens"] / elements,
            "per_token": per_token, "elements_per_thread": elements, "loop": loop}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the numbers here ('-': stdout, nothing else printed)")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: under the interpreter Gluon kernels cannot be compiled")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9 warns when unset; FMA fusion is what we want
    import triton

    variants = {name: {"kernel": kernel, **inspect(kernel, opts)} for name, (kernel, opts) in VARIANTS.items()}
    result = {"triton": triton.__version__, "variants": variants}
    if args.json == "-":
        json.dump(result, sys.stdout)
        return 0
    print(f"Triton {result['triton']}, sm_90a")
    for name, r in result["variants"].items():
        t = r["per_token"]
        print(f"  {name:26s} registers {r['registers']:3d}, local {r['local']} B, shared {r['shared']} B; loop: "
              f"{r['instructions_per_element']:.2f} SASS per element-token, per token {t['MUFU']:.0f} MUFU "
              f"{t['SHFL']:.0f} SHFL {t['LDG']:.0f} LDG {t['BAR']:.0f} BAR, renormalising branch "
              f"{sum(r['loop']['branch'].values())} instructions")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
