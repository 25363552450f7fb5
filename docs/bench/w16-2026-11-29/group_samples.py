"""A kernel's instructions grouped by how often each ran (ncu's source page as CSV, ``--page source --csv
--print-source sass`` of a report with ``--section SourceCounters``): for each execution count, the instructions, their
share of the executed instructions and of the stall samples, and the leading stall reasons. In the local pass, the
instructions run once a token and warp (the reverse step) fall in one group, those run once a segment in others.

    python docs/bench/w16-2026-11-29/group_samples.py local.csv [groups]
"""

import collections
import csv
import gzip
import sys


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path, newline="")) as handle:
        rows = list(csv.reader(handle))
    start = next(i for i, row in enumerate(rows) if row and row[0].strip() == "Address")
    head = [cell.strip() for cell in rows[start]]
    executed, samples = head.index("Instructions Executed"), head.index("Warp Stall Sampling (All Samples)")
    reasons = [i for i, name in enumerate(head) if name.startswith("stall_") and "Not Issued" not in name]
    body = [row for row in rows[start + 1:] if len(row) > executed]
    total_e = sum(number(row[executed]) for row in body)
    total_s = sum(number(row[samples]) for row in body)
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0, collections.Counter()])
    for row in body:
        group = groups[int(number(row[executed]))]
        group[0] += 1
        group[1] += number(row[executed])
        group[2] += number(row[samples])
        for i in reasons:
            group[3][head[i]] += number(row[i])
    print(f"{total_e:,.0f} instructions executed, {total_s:,.0f} stall samples")
    print("  executions | instructions | share of executed | share of samples | leading reasons")
    for count, (n, e, s, why) in sorted(groups.items(), key=lambda kv: -kv[1][2])[:top]:
        lead = ", ".join(f"{name[6:]} {v / total_s:.1%}" for name, v in why.most_common(3))
        print(f"  {count:>10,} | {n:>12} | {e / total_e:>17.1%} | {s / total_s:>16.1%} | {lead}")


if __name__ == "__main__":
    main()
