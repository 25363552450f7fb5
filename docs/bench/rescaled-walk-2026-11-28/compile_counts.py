"""The Gluon local pass compiled for sm_90a on the CPU under the installed Triton, at the launches this record
compares: registers, bytes of stack, dynamic shared memory and SASS instructions (CPU compiles: no GPU). Run from the
repository root, under the Triton the GPU runs (e.g. ``PYTHONPATH=<triton 3.6 unpacked>:<a palimpsa package>``):

    python3 docs/bench/rescaled-walk-2026-11-28/compile_counts.py
"""

import re

import triton
from palimpsa.kernels import gluon_local, gluon_scan

LAUNCHES = {
    "default, bf16": {},
    "default, float32": {"dtype": "fp32"},
    "bf16, WIDEN off": {"widen": False},
    "bf16, WALK_RESCALE on": {"walk_rescale": True},
    "preset keys, bf16": {"seg": 2, "maxnreg": 168, "walk_rescale": True, "widen": False},
    "preset keys, bf16, WIDEN on": {"seg": 2, "maxnreg": 168, "walk_rescale": True},
    "preset keys, float32": {"dtype": "fp32", "seg": 2, "maxnreg": 168, "walk_rescale": True, "widen": False},
    "preset keys, float32, WALK_RESCALE off": {"dtype": "fp32", "seg": 2, "maxnreg": 168, "widen": False},
}


def main():
    print(f"Triton {triton.__version__}: registers, stack bytes, dynamic shared bytes, SASS instructions")
    for name, kwargs in LAUNCHES.items():
        c = gluon_local.compile_kernel(**kwargs)
        count = sum(1 for line in gluon_scan.disassemble(c).splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", line))
        r = gluon_scan.resource_usage(c)
        print(f"  {name:40s} {r['registers']:4d} {r['stack']:4d} {c.metadata.shared:6d} {count:6d}")

if __name__ == "__main__":
    main()
