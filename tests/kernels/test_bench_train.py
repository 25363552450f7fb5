"""``scripts/bench_train.py``'s packed rows (``--documents``): the boundaries it gives the models, and its refusal of
a document count that cannot pack (the benchmark itself needs a GPU)."""

from __future__ import annotations

import subprocess
import sys

from checkpoints import ROOT, load_script

SCRIPT = ROOT / "scripts" / "bench_train.py"


def test_a_row_packs_documents_of_equal_length_the_last_taking_the_remainder():
    packed = load_script("bench_train").packed
    assert packed(8192, 1, "cpu") is None
    assert packed(8192, 4, "cpu").tolist() == [0, 2048, 4096, 6144, 8192]
    bounds = packed(10, 3, "cpu")
    assert bounds.tolist() == [0, 3, 6, 10] and str(bounds.dtype) == "torch.int32"


def test_a_document_count_that_cannot_pack_is_refused_before_anything_runs():
    for extra in (["--documents", "0"], ["--seq-lens", "8192,16", "--documents", "32"]):
        run = subprocess.run([sys.executable, str(SCRIPT), *extra], capture_output=True, text=True, timeout=300)
        assert run.returncode == 2, run.stderr
        assert "give at least 1, and at most the shortest of --seq-lens" in run.stderr.splitlines()[-1], run.stderr
