"""The Gluon kernels on the CPU: they compile for sm_90a (``triton.compile`` with a GPU target, no driver) within
their register budgets, with no spills, no shared memory and no barrier in their loops; and the dispatch picks
them, or not, as documented. Running them needs a Hopper GPU (``scripts/check_scan_gpu.py --backend gluon`` and
``--backend gluon-bwd``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from checkpoints import ROOT

pytest.importorskip("triton")
from palimpsa.kernels import gluon_scan, palimpsa_scan, scan  # noqa: E402
from scan_inputs import make_inputs  # noqa: E402

needs_gluon = pytest.mark.skipif(gluon_scan.GLUON_IMPORT_ERROR is not None,
                                 reason=f"this Triton has no Gluon: {gluon_scan.GLUON_IMPORT_ERROR}")

# Registers of every forward variant's training launch (bf16, beta, checkpoints, 2.7b shapes) under Triton 3.5.1,
# 3.6, 3.7.1 and 3.9 (docs/kernels.md has the table): the band they span, a little widened. A change of mapping that
# moves a variant out of its band should be looked at (occupancy is what the variants trade).
FWD_REGISTERS = {
    "c2l4u1": (150, 175), "c2l4u2": (220, 255), "c2l4u2s": (220, 255), "c1l4u2": (155, 175),
    "c1l4u4s": (240, 255), "c2l2u2": (115, 135), "c2l2u2s": (115, 135), "c2l2u4s": (230, 255),
    "c1l2u2": (88, 104), "c1l2u4s": (155, 212),
}
# SASS instructions per element-token on the token loop's main path (the largest of 3.6 - 3.9, plus 2%; 3.5.1's
# ptxas takes 1-11% more)
FWD_SASS = {
    "c2l4u1": 10.2, "c2l4u2": 10.2, "c2l4u2s": 10.5, "c1l4u2": 12.5, "c1l4u4s": 13.3, "c2l2u2": 13.4,
    "c2l2u2s": 13.6, "c2l2u4s": 13.1, "c1l2u2": 18.2, "c1l2u4s": 17.5,
}
# the backward's, likewise (one warp with one channel pair per thread stays near 168; several warps with one pair
# take 231-254 under 3.5.1 - 3.7.1 and 167 under 3.9)
BWD_REGISTERS = {"b2w1": (238, 255), "b2w2": (238, 255), "b2w4": (238, 255), "b1w1": (160, 175),
                 "b1w4": (160, 255), "b2w1-probe-no-dkdq-atomics": (238, 255), "b1w1g": (160, 175),
                 "b2w1g": (238, 255), "b2w1gr200": (192, 200), "b2w1r200": (192, 200)}
# the stack a variant may keep at the training launch: a register cap (``r<MAXNREG>``) trades spills for warps per
# SM, and the branch-free 4-token blocks (``g``) keep more loads in flight, which one channel pair per thread at
# ptxas's 168 registers parks partly on the stack (48 bytes under 3.9)
BWD_STACK = {"b1w1g": 64, "b2w1gr200": 256, "b2w1r200": 16}
SCRIPT = ROOT / "scripts" / "inspect_gluon_scan.py"


@pytest.fixture(scope="module")
def compiled() -> dict:
    """Every launch compiled for sm_90a in a subprocess: under TRITON_INTERPRET (set for the Triton tests of this
    session) Gluon's library functions are interpreter objects and a Gluon kernel cannot compile."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--json", "-"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)["variants"]


@needs_gluon
@pytest.mark.parametrize("launch", ["training", "every-option"])
@pytest.mark.parametrize("variant", list(gluon_scan.BWD_VARIANTS))
def test_backward_variant_compiles_for_sm90a_within_its_spill_budget(compiled, variant, launch):
    """The backward keeps two states and two adjoints live: 238-255 registers with 2 channels per thread, 167-254
    with one, under Triton 3.5.1 to 3.9 at the training launch, and no spill there (but 8 bytes under 3.7.1's
    ptxas for b2w2 and b2w4, and the stack ``BWD_STACK`` allows the variants that trade spills for something)."""
    mapping = gluon_scan.BWD_VARIANTS[variant]
    r = compiled[f"bwd-{variant}" if launch == "training" else f"bwd-{variant}-every-option"]
    assert "error" not in r, r
    assert r["target"] == "sm_90a"
    assert r["local"] == 0, f"local memory: {r}"
    if variant not in BWD_STACK:  # (those that may spill do it where ptxas likes)
        assert "STL" not in r["loop"]["opcodes"] and "LDL" not in r["loop"]["opcodes"], f"spills in the loop: {r}"
    if launch == "training":
        assert r["stack"] <= BWD_STACK.get(variant, 0), f"register spills: {r}"
        low, high = BWD_REGISTERS[variant]
        assert low <= r["registers"] <= high, r
    else:  # ptxas 13 (Triton >= 3.7) caps some at 168 registers and parks prologue values on the stack
        assert r["stack"] <= max(32, BWD_STACK.get(variant, 0)), f"register spills: {r}"
    # one warp sums in registers and shuffles; several sum dk, dq and the decay gradient through shared memory
    assert (r["shared"] == 0) == (mapping.NW == 1), r
    assert r["per_token"]["BAR"] == 0, r  # none in the recompute walk
    if launch == "training":
        # a 4-token block without a reference is one basic block: its tokens' v, beta, k, k^2 loads issue ahead
        # of the first update (27 under 3.9); without BLOCK4 each token's step waits on its own few loads
        loads = r["largest_block"]["loads_before_arithmetic"]
        assert loads >= 20 if mapping.BLOCK4 else loads <= 8, r["largest_block"]
    if not mapping.BLOCK4:  # (with BLOCK4 the general walk is the rare path, and the innermost loop another one)
        # one recompute step: 2 FFMA per state and the token's loads, address and scale work (the renormalising
        # multiply, 2 FMUL per state, counted where ptxas turns its branch into predication)
        assert r["instructions_per_element"] <= 8.5 * (2 if mapping.CPT == 1 else 1), r


def test_every_forward_variant_has_its_asserted_numbers_and_the_tables_name_real_variants():
    assert set(FWD_REGISTERS) == set(gluon_scan.FWD_VARIANTS) == set(FWD_SASS)
    assert set(BWD_REGISTERS) == set(gluon_scan.BWD_VARIANTS)
    for table, variants in ((gluon_scan.FWD_VARIANT_BY_ROWS, gluon_scan.FWD_VARIANTS),
                            (gluon_scan.BWD_VARIANT_BY_ROWS, gluon_scan.BWD_VARIANTS)):
        assert all(name in variants and "-probe-" not in name for _, name in table)
        assert table[-1][0] is None, "the table's last entry must take any launch"
    assert gluon_scan.FWD_VARIANTS[gluon_scan.FALLBACK_VARIANT].unsupported(8, 32) is None


@needs_gluon
@pytest.mark.parametrize("launch", ["training", "every-option"])
@pytest.mark.parametrize("variant", list(gluon_scan.FWD_VARIANTS))
def test_forward_variant_compiles_for_sm90a_within_budget(compiled, variant, launch):
    mapping = gluon_scan.FWD_VARIANTS[variant]
    r = compiled[f"fwd-{variant}" if launch == "training" else f"fwd-{variant}-every-option"]
    assert "error" not in r, r
    assert r["target"] == "sm_90a"
    assert r["local"] == 0 and r["stack"] == 0, f"register spills: {r}"
    assert r["shared"] == 0, f"the readout should stay inside a warp: {r}"
    per_token, elements = r["per_token"], r["elements_per_thread"]
    assert per_token["BAR"] == 0 and "STS" not in r["loop"]["opcodes"], r["loop"]
    # 3/4 of a reciprocal per state (tiles 0 and 1 share one per pair), plus the scale's exp
    assert per_token["MUFU"] <= 0.75 * elements + 2, per_token
    readouts = 2 if launch == "every-option" else 1  # y, and u when asked for
    levels = (32 // mapping.LV).bit_length() - 1  # the shuffles of a readout: log2 of the lanes along N
    assert per_token["SHFL"] == readouts * mapping.CPT * levels, per_token
    # log decay, v, beta and one vector load per tile of k, k^2 (unless squared in the kernel), q
    assert per_token["LDG"] <= (11 if mapping.SQK else 15), per_token
    if launch == "training":
        low, high = FWD_REGISTERS[variant]
        assert low <= r["registers"] <= high, r
        assert r["instructions_per_element"] <= FWD_SASS[variant], r


def test_supported_says_why_not_on_the_cpu():
    inputs = make_inputs(1, 4, 2, 1, 8, 32, dtype=torch.float32)
    reason = gluon_scan.supported(inputs["v"], inputs["k"])
    assert reason is not None and ("GPU" in reason or "Gluon" in reason)


def test_auto_picks_triton_on_the_gpu_and_the_environment_overrides(monkeypatch):
    """The Gluon forward is correct on an H100 but slower than Triton (docs/kernels.md): ``auto`` keeps Triton
    until it is faster, and ``PALIMPSA_SCAN_BACKEND=gluon`` opts in."""
    inputs = make_inputs(1, 4, 2, 1, 8, 32, dtype=torch.float32)
    v, k = inputs["v"], inputs["k"]
    monkeypatch.delenv(scan.BACKEND_ENV, raising=False)
    assert scan._pick_backend("auto", v, k) == "torch"  # a CPU tensor
    with pytest.raises(RuntimeError, match="backend='gluon' cannot run here"):
        scan._pick_backend("gluon", v, k)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(scan, "_gluon_unsupported", lambda v, k: None)
    assert scan._pick_backend("auto", v, k) == "triton"
    monkeypatch.setenv(scan.BACKEND_ENV, "gluon")
    assert scan._pick_backend("auto", v, k) == "gluon"
    monkeypatch.setattr(scan, "_gluon_unsupported", lambda v, k: "not a Hopper GPU")
    with pytest.raises(RuntimeError, match="not a Hopper GPU"):
        scan._pick_backend("auto", v, k)
    monkeypatch.setenv(scan.BACKEND_ENV, "torch")
    assert scan._pick_backend("auto", v, k) == "torch"
    assert scan._pick_backend("triton", v, k) == "triton"  # an explicit backend wins over the environment
    monkeypatch.setenv(scan.BACKEND_ENV, "cuda")
    with pytest.raises(ValueError, match=scan.BACKEND_ENV):
        scan._pick_backend("auto", v, k)


def test_the_environment_forces_the_triton_path_through_the_public_op(monkeypatch):
    """``PALIMPSA_SCAN_BACKEND=naive`` on the public op: same numbers as asking for it by name."""
    inputs = make_inputs(1, 6, 2, 1, 3, 5)
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
    monkeypatch.setenv(scan.BACKEND_ENV, "naive")
    calls = []
    naive = scan.naive_palimpsa_scan
    monkeypatch.setattr(scan, "naive_palimpsa_scan", lambda *a: calls.append(1) or naive(*a))
    y = palimpsa_scan(*args).y
    assert calls and torch.equal(y, palimpsa_scan(*args, backend="naive").y)


def test_the_gluon_backward_is_opt_in(monkeypatch):
    """``gluon`` swaps in the Gluon forward only; the Gluon backward needs ``PALIMPSA_GLUON_BACKWARD=1``."""
    monkeypatch.delenv(scan.GLUON_BACKWARD_ENV, raising=False)
    assert scan._gluon_configs("triton") == {}
    assert scan._gluon_configs("gluon") == {"fwd_config": {"kernel": "gluon"}}
    monkeypatch.setenv(scan.GLUON_BACKWARD_ENV, "1")
    assert scan._gluon_configs("gluon") == {"fwd_config": {"kernel": "gluon"}, "bwd_config": {"kernel": "gluon"}}
    assert scan._gluon_configs("triton") == {}


def test_the_variant_tables_pick_by_rows_and_the_environment_overrides(monkeypatch):
    """``FWD_VARIANT_BY_ROWS`` / ``BWD_VARIANT_BY_ROWS``: the first entry whose bound holds the launch's rows; the
    environment names any variant (the sweep's way); a variant that cannot map the shapes falls back."""
    monkeypatch.delenv(gluon_scan.FWD_VARIANT_ENV, raising=False)
    monkeypatch.delenv(gluon_scan.BWD_VARIANT_ENV, raising=False)
    monkeypatch.setattr(gluon_scan, "FWD_VARIANT_BY_ROWS", ((160, "c1l2u2"), (None, "c2l4u2")))
    assert gluon_scan.forward_variant(80, 64, 128) == "c1l2u2"
    assert gluon_scan.forward_variant(320, 64, 128) == "c2l4u2"
    assert gluon_scan.forward_variant(320, 4, 128) == gluon_scan.FALLBACK_VARIANT  # P = 4 < 8 channels
    monkeypatch.setenv(gluon_scan.FWD_VARIANT_ENV, "c2l2u4s")
    assert gluon_scan.forward_variant(80, 64, 128) == "c2l2u4s"
    monkeypatch.setenv(gluon_scan.FWD_VARIANT_ENV, "nope")
    with pytest.raises(ValueError, match=gluon_scan.FWD_VARIANT_ENV):
        gluon_scan.forward_variant(80, 64, 128)
    assert gluon_scan.backward_variant(80, 64) == gluon_scan.BWD_VARIANT_BY_ROWS[-1][1]
    monkeypatch.setenv(gluon_scan.BWD_VARIANT_ENV, "b1w4")
    assert gluon_scan.backward_variant(80, 64) == "b1w4"
    assert gluon_scan.FWD_VARIANTS["c1l2u2"].unsupported(64, 32) is not None  # 16 lanes x 4 tiles > 32 states
