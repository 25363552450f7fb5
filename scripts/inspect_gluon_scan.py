"""Compile the Gluon scan forward for sm_90a without a GPU and report its registers, spills and token-loop SASS.

``triton.compile`` with a GPU target needs no driver; ``cuobjdump`` and ``nvdisasm`` ship inside the Triton wheel.
Prints one line per launch variant (registers, local memory, shared memory, SASS instructions per state element
and token in the loop's main path, MUFU / SHFL / LDG per token, the renormalising branch's size) and writes the
numbers as JSON with ``--json`` (``-`` for stdout, which the CPU tests read). Run it under each Triton version to
be supported (docs/kernels.md); TRITON_INTERPRET must be unset (the interpreter replaces Gluon's library).

    python scripts/inspect_gluon_scan.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

VARIANTS = {
    "training-bf16": {},  # the training launch: bf16, beta, checkpoints, 2.7b shapes
    "every-option-fp32-N64": {"dtype": "fp32", "groups": 2, "state_size": 64, "use_initial_state": True,
                              "use_initial_importance": True, "store_final_state": True, "use_uncertainty": True,
                              "is_varlen": True},
}


def inspect(options: dict) -> dict:
    from palimpsa.kernels import gluon_scan

    compiled = gluon_scan.compile_forward(**options)
    loop = gluon_scan.loop_instructions(compiled)
    state_size = options.get("state_size", 128)
    elements = 2 * state_size // 8  # per thread and token: 2 channels x N / 8 states
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

    result = {"triton": triton.__version__, "variants": {name: inspect(opts) for name, opts in VARIANTS.items()}}
    if args.json == "-":
        json.dump(result, sys.stdout)
        return 0
    print(f"Triton {result['triton']}, sm_90a")
    for name, r in result["variants"].items():
        t = r["per_token"]
        print(f"  {name:24s} registers {r['registers']:3d}, local {r['local']} B, shared {r['shared']} B; loop: "
              f"{r['instructions_per_element']:.2f} SASS per element-token, per token {t['MUFU']:.0f} MUFU "
              f"{t['SHFL']:.0f} SHFL {t['LDG']:.0f} LDG {t['BAR']:.0f} BAR, renormalising branch "
              f"{sum(r['loop']['branch'].values())} instructions")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
