"""Where the Gluon local pass's instructions go: the kernel compiled for sm_90a on the CPU (no GPU), its SASS
disassembled with line information (``nvdisasm -g``), and each instruction counted under the innermost function of
``kernels/`` whose source lines it came from, with its most frequent opcodes. Static counts: a helper inlined at
several places counts once per place (``_reverse`` 4 times at ``SEG`` 4, ``_update`` once in pass B's walk loop, 4
times in a segment's stores and 8 times in pass A's unrescaled block). Run from the repository root, under the
Triton the GPU runs (e.g. ``PYTHONPATH=<triton 3.6 unpacked>:<a palimpsa package>``):

    python3 docs/bench/gluon-auto-2026-11-28/sass_by_function.py --dtype fp32
"""

import argparse
import ast
import collections
import os
import re

import triton
from palimpsa.kernels import gluon_local, gluon_scan


def functions(path: str) -> list:
    """``(first line, last line, name)`` of every function in the source file at ``path``."""
    tree = ast.parse(open(path).read())
    return [(n.lineno, n.end_lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def innermost(spans: list, line: int) -> str:
    inside = [(b - a, name) for a, b, name in spans if a <= line <= b]
    return min(inside)[1] if inside else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--seg", type=int, default=4)
    parser.add_argument("--maxnreg", type=int, default=0)
    args = parser.parse_args()
    kernel = gluon_local.compile_kernel(dtype=args.dtype, seg=args.seg, maxnreg=args.maxnreg)
    sass = gluon_scan.disassemble(kernel, line_info=True)
    here = os.path.dirname(gluon_local.__file__)
    spans = {name: functions(os.path.join(here, name)) for name in os.listdir(here) if name.endswith(".py")}
    where, counts, opcodes = ("?", "?"), collections.Counter(), collections.defaultdict(collections.Counter)
    for line in sass.splitlines():
        found = re.search(r'File ".*/(\w+\.py)", line (\d+)', line)
        if found:
            where = (found.group(1), innermost(spans.get(found.group(1), []), int(found.group(2))))
            continue
        op = re.match(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if op:
            counts[where] += 1
            opcodes[where][op.group(1)] += 1
    resources = gluon_scan.resource_usage(kernel)
    print(f"Triton {triton.__version__}, {args.dtype}, SEG {args.seg}, maxnreg {args.maxnreg or 'none'}: "
          f"{sum(counts.values())} SASS instructions, {resources['registers']} registers, "
          f"{resources['stack']} bytes of stack")
    for (source, function), n in counts.most_common():
        top = ", ".join(f"{op} {k}" for op, k in opcodes[(source, function)].most_common(6))
        print(f"{n:6d}  {source:20s} {function:28s} {top}")


if __name__ == "__main__":
    main()
