"""Where a kernel's warps wait, instruction by instruction: a digest of Nsight Compute's source page.

Reads the CSV that ``ncu -i REPORT --page source --csv --print-source sass`` prints for a report collected with
``--section SourceCounters`` (one kernel) and prints the stall samples summed by opcode and by reason, then the
instructions with the most samples: their share, how often they ran, the stall cycles each execution waited (the
samples' period follows from the issued instructions: a warp issues one instruction in each "selected" sample),
and the reasons that dominate them.

    ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section SourceCounters -o local \\
        python scripts/bench_scan.py --profile --backends chunked
    ncu -i local.ncu-rep --page source --csv --print-source sass > local.csv
    python scripts/ncu_source_digest.py local.csv 40
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter

TOTAL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path: str) -> tuple[list[str], list[list[str]]]:
    """The source table's header and rows (the CSV's lines before the ``Address`` header name the kernel)."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    for index, row in enumerate(rows):
        if row and row[0].strip() == "Address":
            head = [cell.strip() for cell in row]
            return head, [r for r in rows[index + 1:] if len(r) == len(head)]
    raise ValueError(f"{path}: no 'Address' header; give the CSV of `ncu -i REPORT --page source --csv "
                     "--print-source sass`")


def digest(head: list[str], body: list[list[str]], top: int = 40) -> str:
    for name in ("Source", TOTAL, EXECUTED, "stall_selected"):
        if name not in head:
            raise ValueError(f"the source page has no {name!r} column; collect the report with --section "
                             "SourceCounters")
    src, total_col, executed_col = head.index("Source"), head.index(TOTAL), head.index(EXECUTED)
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_") and "(Not Issued)" not in h]
    total = sum(number(r[total_col]) for r in body) or 1.0
    selected = sum(number(r[head.index("stall_selected")]) for r in body) or 1.0
    period = sum(number(r[executed_col]) for r in body) / selected  # cycles a sample stands for, per warp
    by_op, by_reason = Counter(), Counter()
    for r in body:
        opcode = re.sub(r"^@!?U?P\w+\s+", "", r[src].strip()).split(" ")[0].split(".")[0]
        by_op[opcode] += number(r[total_col])
        for i in reasons:
            by_reason[head[i]] += number(r[i])
    lines = [f"{len(body)} instructions, {total:.0f} samples, one sample a {period:.0f} warp cycles",
             "by opcode: " + ", ".join(f"{o} {100 * n / total:.1f}%" for o, n in by_op.most_common(16)),
             "by reason: " + ", ".join(f"{o} {100 * n / total:.1f}%" for o, n in by_reason.most_common(12)),
             "", f"top {top} instructions: share of samples, executions, stall cycles an execution, reasons"]
    for r in sorted(body, key=lambda r: -number(r[total_col]))[:top]:
        runs = number(r[executed_col])
        waited = number(r[total_col]) * period / runs if runs else 0.0
        main = sorted(((number(r[i]), head[i]) for i in reasons), reverse=True)[:3]
        lines.append(f"{r[0].strip()[-6:]:>6} {100 * number(r[total_col]) / total:5.2f}% {runs:>11,.0f} "
                     f"{waited:7.1f}  {r[src].strip()[:64]:64s} " + ", ".join(f"{n} {v:.0f}" for v, n in main if v))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("csv", help="the CSV of `ncu -i REPORT --page source --csv --print-source sass`")
    parser.add_argument("top", nargs="?", type=int, default=40, help="instructions to list (default 40)")
    args = parser.parse_args(argv)
    try:
        head, body = read(args.csv)
        print(digest(head, body, args.top))
    except (OSError, ValueError) as error:
        print(f"ncu_source_digest: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
