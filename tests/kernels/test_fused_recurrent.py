"""Triton kernels of the Palimpsa scan against the sequential reference, under ``TRITON_INTERPRET=1`` on the CPU.

Tiny shapes (H = 4, P = 8, N = 16) and small chunks (``CT = 8``, ``BS = 4``) so that several checkpoints, scratch
blocks, odd tails and channel blocks occur; float64 everywhere the interpreter allows, so that any algorithmic
slip shows far above rounding. Every output is allocated NaN-filled, so an element a kernel never writes fails.
"""

from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1", allow_module_level=True)

from palimpsa.kernels import fused_recurrent, palimpsa_scan, palimpsa_step  # noqa: E402
from scan_inputs import assert_close  # noqa: E402
from scan_inputs import make_inputs as random_scan_inputs  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64_TOL = 1e-10
SMALL = {"chunk_size": 8, "block_size": 4}  # several chunks and blocks even at T = 33


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(fused_recurrent, "POISON_OUTPUTS", True)


def make_inputs(batch, length, groups, *, heads=4, head_dim=8, state_size=16, **options) -> dict:
    """The shared random scan inputs at this file's default sizes, on the test device, requiring gradients."""
    return random_scan_inputs(batch, length, heads, groups, head_dim, state_size, requires_grad=True, device=DEVICE,
                              **options)


def run(inputs: dict, backend: str, *, importance_prior=1.0, cu_seqlens=None, final_state=True, uncertainty=True,
        **triton_options) -> list:
    """Outputs as a flat list ``[y, (M_T, I_T,) (u)]``."""
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
    if backend == "triton" and triton_options:
        y, final, u = fused_recurrent.fused_recurrent_palimpsa_scan(*args, importance_prior, state, final_state,
                                                                    uncertainty, cu_seqlens, **triton_options)
    else:
        y, final, u = palimpsa_scan(*args, importance_prior=importance_prior, initial_state=state,
                                    output_final_state=final_state, output_uncertainty=uncertainty,
                                    cu_seqlens=cu_seqlens, backend=backend)
    return [y, *(final if final_state else ()), *([u] if uncertainty else [])]


def check_against_naive(inputs: dict, tol: float, *, importance_prior=1.0, cu_seqlens=None, final_state=True,
                        uncertainty=True, **triton_options) -> None:
    """Forward outputs and every input gradient of a random weighted loss, Triton against naive in float64."""
    exact = {n: None if t is None else t.detach().double().requires_grad_(True) for n, t in inputs.items()}
    options = {"importance_prior": importance_prior, "cu_seqlens": cu_seqlens, "final_state": final_state,
               "uncertainty": uncertainty}
    want = run(exact, "naive", **options)
    got = run(inputs, "triton", **options, **triton_options)
    names = ["y", *(("M_T", "I_T") if final_state else ()), *(("u",) if uncertainty else ())]
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(w.shape, generator=gen, dtype=torch.float64).to(DEVICE) for w in want]
    state_dtype = torch.float64 if inputs["v"].dtype == torch.float64 else torch.float32
    for g, w, name in zip(got, want, names, strict=True):
        assert g.dtype == (inputs["v"].dtype if name in ("y", "u") else state_dtype), f"{name} dtype {g.dtype}"
        assert_close(g, w, tol, name)
    active = [n for n, t in inputs.items() if t is not None]
    grads_want = torch.autograd.grad(sum((w * c).sum() for w, c in zip(want, weights)), [exact[n] for n in active])
    grads_got = torch.autograd.grad(sum((g.double() * c).sum() for g, c in zip(got, weights)),
                                    [inputs[n] for n in active])
    for name, g, w in zip(active, grads_got, grads_want, strict=True):
        assert g.dtype == inputs[name].dtype, f"d{name} dtype {g.dtype}"
        assert_close(g, w, tol, f"d{name}")


@pytest.mark.parametrize(
    "length,groups,with_beta,with_state,importance_prior,config",
    [
        (1, 1, True, True, 1.0, {"BV": 8, "TRANS": False, "UNROLL": 2}),
        (7, 2, False, True, 1.0, {"BV": 4, "TRANS": True, "UNROLL": 2}),
        (33, 1, True, False, 1.0, {"BV": 8, "TRANS": True, "UNROLL": 1}),
        (33, 2, False, False, 0.5, {"BV": 8, "TRANS": False, "UNROLL": 1}),
        (63, 2, True, True, 0.7, {"BV": 8, "TRANS": False, "UNROLL": 2}),
        (29, 1, True, True, 0.7, {"BV": 8, "TRANS": True, "UNROLL": 2, "BWD_BV": 2}),
    ],
    ids=["T1-G1-beta-state", "T7-G2-state-2blocks", "T33-G1-beta", "T33-G2-plain", "T63-G2-beta-state",
         "T29-G1-beta-state-bwdBV2"],
)
def test_matches_naive_forward_and_every_gradient(length, groups, with_beta, with_state, importance_prior, config):
    batch = 2 if length < 40 else 1
    inputs = make_inputs(batch, length, groups, with_beta=with_beta, with_state=with_state, seed=length + groups)
    config = dict(config)
    bwd_config = {"BV": config.pop("BWD_BV", config["BV"]), "TRANS": config["TRANS"], "num_warps": 1}
    check_against_naive(inputs, F64_TOL, importance_prior=importance_prior,
                        fwd_config={**config, "num_warps": 1}, bwd_config=bwd_config, **SMALL)


def test_blocks_of_eight_with_chained_sums():
    """Blocks of 8 tokens (4 pairs) in chunks of 16, packed sequences of 21, 11, 29 and 3 tokens so that blocks end
    after 1, 3, 5 or 7 tokens: the sequential backward with ``CHAIN``'s sums (a GPU's default; the other tests here
    run the interpreter's tree sums), against the sequential reference in float64."""
    bounds = [0, 21, 32, 61, 64]
    inputs = make_inputs(1, 64, 2, n_states=len(bounds) - 1, seed=13)
    cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=DEVICE)
    check_against_naive(inputs, F64_TOL, importance_prior=0.7, cu_seqlens=cu_seqlens,
                        fwd_config={"BV": 8, "TRANS": True, "UNROLL": 2, "num_warps": 1},
                        bwd_config={"BV": 4, "TRANS": False, "num_warps": 1, "CHAIN": 1}, chunk_size=16,
                        block_size=8)


@pytest.mark.parametrize("tau", [1.0, 1e9], ids=["renormalising", "never-renormalising"])
def test_rescaled_forward_is_exact_however_often_it_renormalises(monkeypatch, tau):
    """``RESCALE`` (on by default in the chunked forward's walk, asked for here): the forward walks ``M' = e M``,
    ``J' = e (I - I_prior)`` and reads out ``M' / (J' + e I_prior)``. With a threshold of 1 it renormalises at most
    tokens, with 1e9 at none (scales up to a chunk's whole decay); both give the reference's outputs and gradients
    in float64, the uncertainty included."""
    monkeypatch.setattr(fused_recurrent, "RESCALE_TAU", triton.language.constexpr(tau))
    inputs = make_inputs(2, 33, 2, seed=5)
    check_against_naive(inputs, F64_TOL, importance_prior=0.7,
                        fwd_config={"BV": 8, "TRANS": False, "UNROLL": 2, "num_warps": 1, "RESCALE": 1},
                        bwd_config={"BV": 4, "TRANS": False, "num_warps": 1}, **SMALL)


def test_rescaled_forward_holds_float32_over_fast_decays():
    """Float32 with log decays near -8 in a fifth of the tokens, over 64-token chunks: the rescaled forward rounds
    otherwise than the plain one (so it ran) and holds float32's tolerance against float64."""
    inputs = make_inputs(1, 64, 2, dtype=torch.float32, seed=3)
    tiling = {"BV": 8, "TRANS": False, "UNROLL": 1, "num_warps": 1, "RESCALE": 1}
    sizes = {"chunk_size": 64, "block_size": 8}
    with torch.no_grad():
        plain = run(inputs, "triton", fwd_config={**tiling, "RESCALE": 0}, **sizes)
        rescaled = run(inputs, "triton", fwd_config=tiling, **sizes)
    assert not torch.equal(plain[0], rescaled[0])
    check_against_naive(inputs, 1e-5, importance_prior=0.7, fwd_config=tiling,
                        bwd_config={"BV": 4, "TRANS": False, "num_warps": 1}, **sizes)


def test_cu_seqlens_irregular_with_states():
    bounds = [0, 1, 9, 30, 33]  # lengths 1, 8 (one chunk exactly), 21 (three chunks, odd tail) and 3
    inputs = make_inputs(1, 33, 2, n_states=len(bounds) - 1, seed=11)
    cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=DEVICE)
    check_against_naive(inputs, F64_TOL, importance_prior=0.7, cu_seqlens=cu_seqlens,
                        fwd_config={"BV": 8, "TRANS": True, "UNROLL": 2, "num_warps": 1},
                        bwd_config={"BV": 4, "TRANS": False, "num_warps": 1}, **SMALL)


def test_initial_importance_none_means_the_prior():
    """``initial_state=(M0, None)``: a carried Mamba2 state; ``I0`` starts at the prior and gets no gradient."""
    inputs = make_inputs(2, 13, 2, seed=71)
    inputs["I0"] = None
    check_against_naive(inputs, F64_TOL, importance_prior=0.7, fwd_config={"BV": 8, "TRANS": True, "num_warps": 1},
                        bwd_config={"BV": 8, "TRANS": False, "num_warps": 1}, **SMALL)


def test_y_only_and_default_configs_through_palimpsa_scan():
    """The public op with backend='triton' and its default tiling; no final state or uncertainty gradients."""
    inputs = make_inputs(1, 20, 1, seed=21)
    check_against_naive(inputs, F64_TOL, final_state=False, uncertainty=False)


def test_float32_and_bfloat16_inputs():
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
        inputs = make_inputs(1, 19, 2, dtype=dtype, seed=31)
        check_against_naive(inputs, tol, importance_prior=0.7, fwd_config={"BV": 8, "TRANS": True, "num_warps": 1},
                            bwd_config={"BV": 8, "TRANS": False, "num_warps": 1}, **SMALL)


def test_no_gradient_needed_stores_no_checkpoints(monkeypatch):
    stored = []
    forward = fused_recurrent._forward
    monkeypatch.setattr(fused_recurrent, "_forward", lambda *args: stored.append(args[11]) or forward(*args))
    inputs = make_inputs(1, 9, 1, seed=41)
    with torch.no_grad():
        y = palimpsa_scan(inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"],
                          backend="triton").y
    exact = {n: None if t is None else t.detach() for n, t in inputs.items()}
    want = palimpsa_scan(exact["v"], exact["k"], exact["q"], exact["log_decay"], exact["beta"], backend="naive").y
    assert_close(y, want, F64_TOL, "y")
    assert y.grad_fn is None
    assert stored == [False]


@pytest.mark.parametrize("used", ["M_T", "I_T", "u", "M_T+u"])
def test_gradients_through_some_outputs_only(used):
    """A loss on some outputs only: the others' gradients arrive as None and count as zero."""
    inputs = make_inputs(1, 13, 1, seed=91)
    exact = {n: None if t is None else t.detach().double().requires_grad_(True) for n, t in inputs.items()}
    names = ["y", "M_T", "I_T", "u"]
    want = dict(zip(names, run(exact, "naive", importance_prior=0.7)))
    got = dict(zip(names, run(inputs, "triton", importance_prior=0.7, chunk_size=8, block_size=4)))
    active = [n for n, t in inputs.items() if t is not None]
    grads_want = torch.autograd.grad(sum(want[n].sum() for n in used.split("+")), [exact[n] for n in active],
                                     allow_unused=True)
    grads_got = torch.autograd.grad(sum(got[n].sum() for n in used.split("+")), [inputs[n] for n in active],
                                    allow_unused=True)
    for name, g, w in zip(active, grads_got, grads_want, strict=True):
        if w is None:
            assert g is None or not g.any(), f"d{name}"
        else:
            assert_close(g, w, F64_TOL, f"d{name}")


def test_the_operators_pass_torch_opcheck():
    """Schema, autograd registration, fake-tensor shapes (for torch.compile) and AOT dispatch of both custom
    operators, without and with packed sequences (whose checkpoint count is a dynamic size)."""
    import json

    checks = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    configs = (json.dumps(fused_recurrent.FWD_CONFIG), json.dumps(fused_recurrent.BWD_CONFIG))
    inputs = make_inputs(2, 9, 1, seed=3)
    args = [inputs[n] for n in ("v", "k", "q", "log_decay", "beta", "M0", "I0")]
    result = torch.library.opcheck(torch.ops.palimpsa.triton_scan_forward.default,
                                   (*args, None, 0.7, True, True, True, *configs, 8, 4), test_utils=checks)
    assert set(result.values()) == {"SUCCESS"}, result
    packed = make_inputs(1, 9, 1, n_states=2, seed=4)
    args = [packed[n] for n in ("v", "k", "q", "log_decay", "beta", "M0", "I0")]
    cu_seqlens = torch.tensor([0, 3, 9], dtype=torch.int32, device=DEVICE)
    result = torch.library.opcheck(torch.ops.palimpsa.triton_scan_forward.default,
                                   (*args, cu_seqlens, 0.7, True, False, True, *configs, 8, 4), test_utils=checks)
    assert set(result.values()) == {"SUCCESS"}, result


def test_backward_splits_channels_finer_on_small_grids(monkeypatch):
    """Under two waves of 4-channel programs (B = 1 at 2.7b shapes: 1280 on 132 SMs) the backward takes 2."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused_recurrent, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda")
    assert fused_recurrent._backward_config(1, 80, 64, cuda)["BV"] == fused_recurrent.SMALL_GRID_BV == 2
    assert fused_recurrent._backward_config(4, 80, 64, cuda) == fused_recurrent.BWD_CONFIG
    assert fused_recurrent._backward_config(1, 80, 64, torch.device("cpu")) == fused_recurrent.BWD_CONFIG


def test_forward_takes_one_warp_programs_where_they_fill_the_gpu(monkeypatch):
    """2.7b shapes on 132 SMs: B = 4 gives 2560 one-warp programs of eight channels (19 an SM), which take the
    one-warp tiling; B = 1 (640, under 8 an SM) keeps the four-warp one, as does the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused_recurrent, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda")
    assert fused_recurrent._forward_config(4, 80, 64, cuda) == fused_recurrent.ONE_WARP_FWD_CONFIG
    assert fused_recurrent._forward_config(2, 80, 64, cuda) == fused_recurrent.ONE_WARP_FWD_CONFIG
    assert fused_recurrent._forward_config(1, 80, 64, cuda) == fused_recurrent.FWD_CONFIG
    assert fused_recurrent._forward_config(4, 80, 64, torch.device("cpu")) == fused_recurrent.FWD_CONFIG


def test_bad_block_size_and_unroll_raise():
    inputs = make_inputs(1, 4, 1, seed=51)
    with pytest.raises(ValueError, match="block_size"):
        run(inputs, "triton", chunk_size=8, block_size=3)
    with pytest.raises(ValueError, match="UNROLL"):
        run(inputs, "triton", fwd_config={"BV": 8, "TRANS": True, "UNROLL": 3, "num_warps": 1})


@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "nobeta"])
def test_step_matches_scan_token_by_token(with_beta):
    """``palimpsa_step`` (PyTorch on the CPU) and the Triton step kernel reproduce the scan one token at a time."""
    inputs = {n: None if t is None else t.detach() for n, t in make_inputs(2, 6, 2, with_beta=with_beta,
                                                                             seed=61).items()}
    y_scan, (m_scan, i_scan), u_scan = palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], importance_prior=0.7,
        initial_state=(inputs["M0"], inputs["I0"]), output_final_state=True, output_uncertainty=True, backend="naive")
    for use_kernel in (False, True):
        state = (inputs["M0"].clone(), inputs["I0"].clone())
        for t in range(inputs["v"].shape[1]):
            args = (inputs["v"][:, t], inputs["k"][:, t], inputs["q"][:, t], inputs["log_decay"][:, t],
                    None if inputs["beta"] is None else inputs["beta"][:, t])
            if use_kernel:
                y, u = fused_recurrent.fused_recurrent_palimpsa_step(*args, state, 0.7, True)
            else:
                y, _, u = palimpsa_step(*args, state, importance_prior=0.7, output_uncertainty=True)
            assert_close(y, y_scan[:, t], F64_TOL, f"y[{t}]")
            assert_close(u, u_scan[:, t], F64_TOL, f"u[{t}]")
        assert_close(state[0], m_scan, F64_TOL, "M")
        assert_close(state[1], i_scan, F64_TOL, "I")


def test_one_token_runs_the_triton_kernels_where_gluon_is_asked_for(monkeypatch):
    """A decoding step through the scan: Triton 3.6 aborts compiling the Gluon kernels with the length folded to 1,
    so one token runs (and differentiates through) the Triton kernels, exactly; longer calls still reach Gluon."""
    from palimpsa.kernels import gluon_scan

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(gluon_scan, "gluon_forward", reached)
    monkeypatch.setattr(gluon_scan, "gluon_backward", reached)
    gluon = {"fwd_config": {"kernel": "gluon"}, "bwd_config": {"kernel": "gluon"}}
    check_against_naive(make_inputs(2, 1, 2, dtype=torch.float64), F64_TOL, **gluon)
    with pytest.raises(Reached):
        run(make_inputs(2, 2, 2, dtype=torch.float64), "triton", **gluon)
