"""The scan's values and importance gains (``palimpsa.kernels.gains``): the fused Triton kernels under
``TRITON_INTERPRET=1`` against the PyTorch expressions, values and every gradient (where each path runs:
``test_fused_dispatch.py``)."""

from __future__ import annotations

import os

import pytest
import torch
from palimpsa.kernels import gains, reference_values_and_gains, scan_values_and_gains

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_kernels = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()),
                                   reason="Triton kernels need a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def operands(batch=2, length=37, heads=3, head_dim=8, dtype=torch.bfloat16, acc=torch.float32, seed=0):
    """``x`` as the mixer has it (a split of a wider activation, so a strided view), the gate as the Linear gives
    it, ``dt`` and ``factor`` in the accumulation dtype, all requiring gradients."""
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(batch, length, heads * head_dim + 5, generator=gen).to(dtype)
    x = wide[..., 3:3 + heads * head_dim].view(batch, length, heads, head_dim)
    gate = (3 * torch.randn(batch, length, heads * head_dim, generator=gen)).to(dtype)
    dt = torch.rand(batch, length, heads, generator=gen, dtype=torch.float64).to(acc) + 0.01
    factor = torch.randn(batch, length, heads, generator=gen, dtype=torch.float64).to(acc)
    leaves = [t.to(DEVICE).requires_grad_(True) for t in (wide, gate, dt, factor)]
    wide, gate, dt, factor = leaves
    x = wide[..., 3:3 + heads * head_dim].view(batch, length, heads, head_dim)
    return x, dt, gate, factor, leaves


def values_and_grads(fn, ops, v_weight=True, beta_weight=True):
    x, dt, gate, factor, leaves = ops
    v, beta = fn(x, dt, gate, factor)
    gen = torch.Generator().manual_seed(3)
    loss = 0
    if v_weight:
        loss = loss + (v * torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v)).sum()
    if beta_weight:
        loss = loss + (beta * torch.randn(beta.shape, generator=gen, dtype=torch.float64).to(beta)).sum()
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return v, beta, grads


def close(got, want, tol, name):
    if want is None:
        assert got is None or not got.abs().any(), f"{name}: a gradient where none is due"
        return
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()
    assert err < tol, f"{name}: relative error {err:.2e} >= {tol}"


@needs_kernels
@pytest.mark.parametrize("dtype, acc, tol", [
    (torch.bfloat16, torch.float32, 1e-2),  # the training launch: gradients rounded to bf16
    (torch.float32, torch.float32, 1e-6),
    (torch.float64, torch.float64, 1e-12),
])
@pytest.mark.parametrize("used", ["both", "v", "beta"])
def test_fused_kernels_match_the_pytorch_expressions(dtype, acc, tol, used):
    from palimpsa.kernels import fused_gains

    ops = operands(dtype=dtype, acc=acc)
    assert fused_gains.supported(*ops[:4])
    weights = {"v_weight": used != "beta", "beta_weight": used != "v"}
    v, beta, grads = values_and_grads(fused_gains.fused_values_and_gains, ops, **weights)
    v_ref, beta_ref, grads_ref = values_and_grads(reference_values_and_gains, ops, **weights)
    out = torch.float64 if dtype == torch.float64 else torch.float32
    assert v.dtype == beta.dtype == out and v.shape == beta.shape == ops[0].shape
    close(v, v_ref, 1e-6 if dtype != torch.float64 else 1e-14, "v")
    close(beta, beta_ref, 1e-6 if dtype != torch.float64 else 1e-14, "beta")
    for name, got, want in zip(("x", "gate", "dt", "factor"), grads, grads_ref, strict=True):
        if got is not None:
            assert got.dtype == want.dtype, name
        close(got, want, tol, name)


@needs_kernels
def test_odd_head_dims_and_a_gate_per_head():
    """``P`` not a power of two (masked channels), the gate given as ``[B, L, H, P]``, one token."""
    from palimpsa.kernels import fused_gains

    for length in (1, 40):
        x, dt, gate, factor, leaves = operands(length=length, heads=2, head_dim=6, dtype=torch.float32)
        gate4 = gate.view(*x.shape)
        ops = (x, dt, gate4, factor, leaves)
        v, beta, grads = values_and_grads(fused_gains.fused_values_and_gains, ops)
        v_ref, beta_ref, grads_ref = values_and_grads(reference_values_and_gains, ops)
        close(v, v_ref, 1e-6, "v")
        close(beta, beta_ref, 1e-6, "beta")
        for name, got, want in zip(("x", "gate", "dt", "factor"), grads, grads_ref, strict=True):
            close(got, want, 1e-6, name)


def test_a_mamba2_layer_has_no_gains_and_nothing_fused(monkeypatch):
    """Without a gate (a Mamba2 layer) the values come from PyTorch and no beta at all, even where the kernels run."""
    x, dt, _, _, _ = operands()
    monkeypatch.setattr(gains, "_fused", lambda x: pytest.fail("the kernels were asked for"))
    v, beta = scan_values_and_gains(x, dt, None, None)
    assert beta is None and torch.equal(v, reference_values_and_gains(x, dt, None, None)[0])


@needs_kernels
def test_operands_the_kernels_do_not_take():
    from palimpsa.kernels import fused_gains

    x, dt, gate, factor, _ = operands(dtype=torch.float32)
    assert fused_gains.supported(x, dt, gate, factor)
    assert not fused_gains.supported(x.transpose(2, 3), dt, gate, factor)  # channels not contiguous
    assert not fused_gains.supported(x, dt.double(), gate, factor)  # dt not in the output dtype
    assert not fused_gains.supported(x, dt, gate[..., :-1], factor)  # the gate does not cover H * P
    assert not fused_gains.supported(x, dt, gate, None)
