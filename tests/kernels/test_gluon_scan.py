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
    "c1l4u2s": (155, 175), "c2l2u2": (115, 135), "c2l2u2s": (115, 135), "c2l2u4s": (230, 255),
    "c1l2u2": (88, 104), "c1l2u4s": (155, 212), "c2l2u2w2": (115, 135), "c1l4u4s": (240, 255),
}
# SASS instructions per element-token on the token loop's main path (the largest of 3.6 - 3.9, plus 2%; 3.5.1's
# ptxas takes 1-11% more)
FWD_SASS = {
    "c2l4u1": 10.2, "c2l4u2": 10.2, "c2l4u2s": 10.5, "c1l4u2": 12.5, "c1l4u2s": 13.2, "c2l2u2": 13.4,
    "c2l2u2s": 13.6, "c2l2u4s": 13.1, "c1l2u2": 18.2, "c1l2u4s": 17.5, "c2l2u2w2": 13.4, "c1l4u4s": 13.3,
}
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
@pytest.mark.parametrize("variant", ["bwd-training-bf16", "bwd-every-option-fp32-N64"])
def test_backward_compiles_for_sm90a_without_spills(compiled, variant):
    """The backward keeps two states and two adjoints of 16 elements per thread live: 244-254 registers under
    Triton 3.5.1 to 3.9 at the training launch, and no spill."""
    r = compiled[variant]
    assert r["target"] == "sm_90a"
    assert r["local"] == 0, f"local memory: {r}"
    assert "STL" not in r["loop"]["opcodes"] and "LDL" not in r["loop"]["opcodes"], f"spills in the loop: {r}"
    if variant == "bwd-training-bf16":
        assert r["stack"] == 0, f"register spills: {r}"
    else:  # ptxas 13 (Triton >= 3.7) caps this variant at 168 registers and parks 3 prologue values on the stack
        assert r["stack"] <= 32, f"register spills: {r}"
    assert r["shared"] == 0 and r["per_token"]["BAR"] == 0, r
    # one recompute step: 2 FFMA per state and the token's loads, address and scale work (the renormalising
    # multiply, 2 FMUL per state, counted where ptxas turns its branch into predication)
    assert r["instructions_per_element"] <= 8.5, r


def test_every_forward_variant_has_its_asserted_numbers():
    assert set(FWD_REGISTERS) == set(gluon_scan.FWD_VARIANTS) == set(FWD_SASS)
    assert all(name in gluon_scan.FWD_VARIANTS for _, name in gluon_scan.FWD_VARIANT_BY_ROWS)
    assert gluon_scan.FWD_VARIANT_BY_ROWS[-1][0] is None, "the table's last entry must take any launch"


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
