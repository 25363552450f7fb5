"""The digest of Nsight Compute's source page (``scripts/ncu_source_digest.py``) on a hand-made CSV in the layout
``ncu --page source --csv --print-source sass`` prints: sums by opcode and reason, the stall cycles an execution
waited, and a clear error for a file that is not such a CSV."""

from __future__ import annotations

import csv
import subprocess
import sys

from checkpoints import ROOT, load_script

SCRIPT = ROOT / "scripts" / "ncu_source_digest.py"


def _module():
    return load_script("ncu_source_digest")


def _write(path, rows):
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
            "Instructions Executed", "stall_long_sb", "stall_selected", "stall_wait", "stall_long_sb (Not Issued)"]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Kernel Name", "palimpsa_bwd_local_kernel"])
        writer.writerow(head)
        writer.writerows(rows)


def test_sums_and_the_cycles_an_execution_waited(tmp_path):
    # 1,000 + 3,000 instructions issued over 4 selected samples: one sample stands for 1,000 warp cycles
    path = tmp_path / "source.csv"
    _write(path, [
        ["0x7f00", "LDG.E R2, desc[UR4][R4.64]", "2", "0", "1,000", "0", "2", "0", "0"],
        ["0x7f10", "FMUL R3, R2, 1.4426950216293334961", "10", "8", "1,000", "8", "0", "2", "8"],
        ["0x7f20", "@!P0 FFMA R5, R3, R3, R5", "4", "2", "2,000", "0", "2", "2", "0"],
    ])
    module = _module()
    text = module.digest(*module.read(str(path)), top=2)
    assert "3 instructions, 16 samples, one sample a 1000 warp cycles" in text
    assert "by opcode: FMUL 62.5%, FFMA 25.0%, LDG 12.5%" in text  # predicates are not opcodes
    assert "by reason: stall_long_sb 50.0%, stall_selected 25.0%, stall_wait 25.0%" in text
    top = text.splitlines()[-2:]
    # the FMUL: 10 samples x 1,000 cycles over 1,000 executions; listed first, the LDG (fewest samples) left out
    assert top[0].split()[:4] == ["0x7f10", "62.50%", "1,000", "10.0"]
    assert top[1].split()[:4] == ["0x7f20", "25.00%", "2,000", "2.0"]


def test_a_file_that_is_not_the_source_page_fails_in_one_line(tmp_path):
    path = tmp_path / "details.csv"
    path.write_text('"ID","Metric Name","Metric Value"\n"0","Duration","3.5"\n')
    run = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "no 'Address' header" in run.stderr
    assert "Traceback" not in run.stderr
