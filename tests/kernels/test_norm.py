"""A block's residual sum and RMSNorm (``palimpsa.kernels.norm``): the fused Triton kernels under
``TRITON_INTERPRET=1`` against the PyTorch expressions, both outputs and every gradient (where each path runs:
``test_fused_dispatch.py``)."""

from __future__ import annotations

import os

import pytest
import torch
from fused_checks import close, weighted_grads
from palimpsa.kernels.norm import reference_add_rms_norm

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_kernels = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()),
                                   reason="Triton kernels need a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def operands(rows=(2, 21), channels=40, dtype=torch.bfloat16, residual_dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(*rows, channels, generator=gen).to(dtype)
    residual = None if residual_dtype is None else (3 * torch.randn(*rows, channels, generator=gen)).to(residual_dtype)
    weight = (1 + 0.5 * torch.randn(channels, generator=gen)).to(dtype)
    leaves = [t.to(DEVICE).requires_grad_(True) for t in (hidden, residual, weight) if t is not None]
    hidden, weight = leaves[0], leaves[-1]
    return (hidden, leaves[1] if residual is not None else None, weight), leaves


def outputs_and_grads(fn, ops, leaves, residual_in_fp32, use_residual=True):
    normed, residual = fn(*ops, 1e-5, residual_in_fp32)
    return normed, residual, weighted_grads([normed, residual] if use_residual else [normed], leaves)


@needs_kernels
@pytest.mark.parametrize("dtype, residual_dtype, residual_in_fp32, tol", [
    (torch.bfloat16, torch.float32, True, 1e-2),  # every block after the first in training (residual_in_fp32)
    (torch.bfloat16, None, True, 1e-2),  # the first block: the embeddings alone
    (torch.bfloat16, torch.bfloat16, False, 1e-2),  # a residual kept in the model's dtype
    (torch.float32, torch.float32, True, 1e-5),
    (torch.float32, None, False, 1e-5),
])
@pytest.mark.parametrize("use_residual", [True, False])
def test_fused_kernels_match_the_pytorch_expressions(dtype, residual_dtype, residual_in_fp32, tol, use_residual):
    from palimpsa.kernels import fused_norm

    ops, leaves = operands(dtype=dtype, residual_dtype=residual_dtype)
    assert fused_norm.supported(*ops)
    got = outputs_and_grads(fused_norm.fused_add_rms_norm, ops, leaves, residual_in_fp32, use_residual)
    want = outputs_and_grads(reference_add_rms_norm, ops, leaves, residual_in_fp32, use_residual)
    for name, g, w in zip(("normed", "residual"), got[:2], want[:2]):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        close(g, w, tol, name)
    for name, g, w, leaf in zip(("hidden", "residual", "weight") if len(leaves) == 3 else ("hidden", "weight"),
                                got[2], want[2], leaves, strict=True):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape, name
        close(g, w, tol, name)


@needs_kernels
def test_no_tokens():
    """An empty batch: empty outputs, and the weight's gradient zero from a backward that sums nothing."""
    from palimpsa.kernels import fused_norm

    ops, leaves = operands(rows=(0, 5), dtype=torch.float32)
    normed, residual, grads = outputs_and_grads(fused_norm.fused_add_rms_norm, ops, leaves, True)
    assert normed.shape == residual.shape == (0, 5, 40)
    assert grads[0].shape == (0, 5, 40) and not grads[-1].any()


@needs_kernels
def test_operands_the_kernels_do_not_take():
    from palimpsa.kernels import fused_norm

    hidden, residual, weight = operands()[0]
    assert fused_norm.supported(hidden, residual, weight) and fused_norm.supported(hidden, None, weight)
    assert not fused_norm.supported(hidden.transpose(0, 1), None, weight)  # not contiguous
    assert not fused_norm.supported(hidden, residual[:1], weight)  # a residual of another shape
    assert not fused_norm.supported(hidden, residual, weight[:-1])  # a weight that does not cover the channels
    assert not fused_norm.supported(hidden.double(), None, weight)  # float64 stays with PyTorch
