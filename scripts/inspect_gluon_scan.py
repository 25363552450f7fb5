"""Compile the Gluon scan kernels for sm_90a without a GPU and report their registers, spills and loop SASS.

``triton.compile`` with a GPU target needs no driver; ``cuobjdump`` and ``nvdisasm`` ship inside the Triton wheel.
Prints one line per launch (every variant of ``gluon_scan.FWD_VARIANTS`` and ``BWD_VARIANTS`` at the training
launch and with every option): registers, local memory, shared memory; for the forward the SASS
instructions per state element and token in the token loop's main path, MUFU / SHFL / LDG per token and thread,
and the size of the rest of the loop (the renormalising blocks); for the backward the same of its recompute
step, the innermost loop. Writes the numbers as JSON with ``--json`` (``-`` for stdout, which the CPU tests
read). Run it under each Triton version to be supported (docs/kernels.md); TRITON_INTERPRET must be unset (the
interpreter replaces Gluon's library).

    python scripts/inspect_gluon_scan.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

EVERY_OPTION = {"dtype": "fp32", "groups": 2, "state_size": 64, "use_initial_state": True,
                "use_initial_importance": True, "is_varlen": True}
FWD_EVERY_OPTION = {**EVERY_OPTION, "store_final_state": True, "use_uncertainty": True}
BWD_EVERY_OPTION = {**EVERY_OPTION, "use_final_state_gradient": True, "use_du": True}


def variants(quick: bool) -> dict:
    """name: (kernel, compile options). Every forward variant at the training launch (``fwd-<variant>``: bf16,
    beta, checkpoints, 2.7b shapes) and with every option (``fwd-<variant>-every-option``, not with ``quick``);
    every backward variant likewise (``bwd-<variant>``, ``bwd-<variant>-every-option``)."""
    from palimpsa.kernels import gluon_scan

    result = {}
    for kernel, prefix, table, every in (("forward", "fwd", gluon_scan.FWD_VARIANTS, FWD_EVERY_OPTION),
                                         ("backward", "bwd", gluon_scan.BWD_VARIANTS, BWD_EVERY_OPTION)):
        for name in table:
            result[f"{prefix}-{name}"] = (kernel, {"variant": name})
            if not quick:
                result[f"{prefix}-{name}-every-option"] = (kernel, {"variant": name, **every})
    return result


def inspect(kernel: str, options: dict) -> dict:
    from palimpsa.kernels import gluon_scan

    state_size = options.get("state_size", 128)
    if kernel == "forward":
        compiled = gluon_scan.compile_forward(**options)
        mapping = gluon_scan.FWD_VARIANTS[options["variant"]]
        elements, tokens = mapping.elements(state_size), mapping.U
    else:
        compiled = gluon_scan.compile_backward(**options)
        # per thread and token: CPT channels x N / 16 states
        elements, tokens = gluon_scan.BWD_VARIANTS[options["variant"]].CPT * state_size // 16, 1
    loop = gluon_scan.loop_instructions(compiled, tokens=tokens)
    per_token = {name: loop["opcodes"].get(name, 0) / loop["tokens"] for name in ("MUFU", "SHFL", "LDG", "BAR")}
    return {**gluon_scan.resource_usage(compiled), "target": "sm_90a" if ".target sm_90a" in compiled.asm["ptx"]
            else "?", "instructions_per_element": sum(loop["opcodes"].values()) / loop["tokens"] / elements,
            "per_token": per_token, "elements_per_thread": elements, "loop": loop,
            "largest_block": gluon_scan.largest_block(compiled)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the numbers here ('-': stdout, nothing else printed)")
    parser.add_argument("--quick", action="store_true", help="the training launches only")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: under the interpreter Gluon kernels cannot be compiled")
    import triton

    found = {}
    for name, (kernel, opts) in variants(args.quick).items():
        try:
            found[name] = {"kernel": kernel, **inspect(kernel, opts)}
        except Exception as error:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
            found[name] = {"kernel": kernel, "error": f"{type(error).__name__}: {str(error)[-300:]}"}
    result = {"triton": triton.__version__, "variants": found}
    if args.json == "-":
        json.dump(result, sys.stdout)
        return 0
    print(f"Triton {result['triton']}, sm_90a")
    for name, r in result["variants"].items():
        if "error" in r:
            print(f"  {name:32s} FAILED to compile: {r['error']}")
            continue
        t = r["per_token"]
        print(f"  {name:32s} registers {r['registers']:3d}, stack {r['stack']} B, local {r['local']} B, shared "
              f"{r['shared']} B; longest block {r['largest_block']['instructions']} SASS, "
              f"{r['largest_block']['loads_before_arithmetic']} LDG before its first FFMA; loop: "
              f"{r['instructions_per_element']:.2f} SASS per element-token, per token {t['MUFU']:.0f} MUFU "
              f"{t['SHFL']:.0f} SHFL {t['LDG']:.0f} LDG {t['BAR']:.0f} BAR, renormalising branch "
              f"{sum(r['loop']['branch'].values())} instructions")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
