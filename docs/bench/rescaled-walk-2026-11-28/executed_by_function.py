"""Where the Gluon local pass's executed instructions go: Nsight Compute's per-instruction execution counts (the
source page of a report collected with ``--section SourceCounters``) summed by the source function of ``kernels/``
that each instruction came from, read from the profiled kernel's own cubin disassembled with line information
(``nvdisasm -g``). The dynamic counterpart of ``docs/bench/gluon-auto-2026-11-28/sass_by_function.py``'s static
counts. Instructions are matched by their offset in the kernel, and the two listings' opcodes are checked to agree.

    ncu -i REPORT --page source --csv --print-source sass > local.csv
    python3 executed_by_function.py local.csv $TRITON_CACHE_DIR/*/palimpsa_gluon_local_kernel.cubin \
        --element-tokens 1342177280      # B T H P N of the profiled scan: prints per element-token too
"""

import argparse
import collections
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
import ncu_source_digest  # noqa: E402  (the CSV reader)

sys.path.insert(0, os.path.join(HERE, "..", "gluon-auto-2026-11-28"))
from sass_by_function import functions, innermost  # noqa: E402  (a source file's functions, a line's innermost)


def disassemble(cubin: str, nvdisasm: str) -> dict:
    """``offset -> (opcode, (file, function, line))`` of every instruction of the cubin's one kernel."""
    kernels = os.path.join(HERE, "..", "..", "..", "kernels")
    spans = {name: functions(os.path.join(kernels, name)) for name in os.listdir(kernels) if name.endswith(".py")}
    sass = subprocess.run([nvdisasm, "-c", "-g", cubin], capture_output=True, text=True, check=True).stdout
    where, out = ("?", "?", 0), {}
    for line in sass.splitlines():
        found = re.search(r'File ".*/(\w+\.py)", line (\d+)', line)
        if found:
            n = int(found.group(2))
            where = (found.group(1), innermost(spans.get(found.group(1), []), n), n)
            continue
        op = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if op:
            out[int(op.group(1), 16)] = (op.group(2), where)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("cubin")
    parser.add_argument("--nvdisasm", default=None, help="default: the one in the Triton wheel")
    parser.add_argument("--element-tokens", type=float, default=0.0,
                        help="state elements x tokens of the profiled scan (B T H P N), to print per element-token")
    parser.add_argument("--lines", type=int, default=25, help="also list the N most executed source lines")
    args = parser.parse_args()
    if args.nvdisasm is None:
        import triton
        args.nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    head, body = ncu_source_digest.read(args.csv)
    src, executed = head.index("Source"), head.index(ncu_source_digest.EXECUTED)
    sampled = head.index(ncu_source_digest.TOTAL) if ncu_source_digest.TOTAL in head else None
    base = min(int(r[0].strip(), 16) for r in body)
    listing = disassemble(args.cubin, args.nvdisasm)
    by_function, ops, by_line, mismatched = collections.Counter(), collections.defaultdict(collections.Counter), \
        collections.Counter(), 0
    samples, line_samples = collections.Counter(), collections.Counter()
    for r in body:
        offset = int(r[0].strip(), 16) - base
        opcode = re.sub(r"^@!?U?P\w+\s+", "", r[src].strip()).split(" ")[0].split(".")[0]
        entry = listing.get(offset)
        if entry is None or entry[0] != opcode:
            mismatched += 1
            continue
        runs = ncu_source_digest.number(r[executed])
        key = entry[1][:2]
        by_function[key] += runs
        ops[key][opcode] += runs
        by_line[entry[1]] += runs
        if sampled is not None:
            samples[key] += ncu_source_digest.number(r[sampled])
            line_samples[entry[1]] += ncu_source_digest.number(r[sampled])
    total = sum(by_function.values())
    scale = 32 / args.element_tokens if args.element_tokens else 0.0
    print(f"{len(body)} instructions in the report, {len(listing)} in the cubin, {mismatched} unmatched; "
          f"{total:,.0f} warp instructions executed" + (f", {total * scale:.2f} an element-token" if scale else ""))
    all_samples = sum(samples.values()) or 1.0
    print("warp instructions executed, per element-token, share of the stall samples (where warps wait), source "
          "function, its opcodes")
    for key, n in by_function.most_common():
        top = ", ".join(f"{op} {100 * k / (n or 1):.0f}%" for op, k in ops[key].most_common(5))
        per = f"{n * scale:6.2f}" if scale else ""
        print(f"{n:16,.0f} {per} {100 * samples[key] / all_samples:5.1f}%  {key[0]:18s} {key[1]:28s} {top}")
    print(f"\nthe {args.lines} most executed source lines")
    for (source, function, line), n in by_line.most_common(args.lines):
        per = f"{n * scale:6.2f}" if scale else ""
        share = 100 * line_samples[(source, function, line)] / all_samples
        print(f"{n:16,.0f} {per} {share:5.1f}%  {source}:{line} ({function})")
    print(f"\nthe {args.lines} source lines where warps wait most (share of the stall samples)")
    for (source, function, line), n in line_samples.most_common(args.lines):
        print(f"{100 * n / all_samples:5.1f}%  {source}:{line} ({function})")


if __name__ == "__main__":
    main()
