"""The stall reasons per issued instruction (at least 0.05), the pipes' use, the duration and the issue rate of each
kernel in an ncu text report (``ncu ... --metrics regex:smsp__average_warps_issue_stalled_.*`` as run2.sh and
run3.sh collect it): ``python3 ncu_stalls.py ncu.txt``."""

import re
import sys

METRIC = re.compile(r"\s+(smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio"
                    r"|smsp__inst_executed_pipe_\w+\S*|Duration|Issued Warp Per Scheduler|No Eligible)"
                    r"\s+(\S+\s+)?([\d.,]+)\s*$")


def main(path: str):
    name = None
    for line in open(path):
        kernel = re.match(r"\s+(palimpsa_\w+)", line)
        if kernel:
            name = kernel.group(1)
            print(name)
            continue
        m = METRIC.match(line)
        if m and name:
            value = float(m.group(4).replace(",", ""))
            if m.group(2) is None or value >= 0.05:
                print(f"  {m.group(2) or m.group(1)} {value}")


if __name__ == "__main__":
    main(sys.argv[1])
