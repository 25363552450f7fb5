"""A mixer's readout (``palimpsa.kernels.readout``): the fused Triton kernels under ``TRITON_INTERPRET=1`` against
the PyTorch expressions, the output and every gradient (where each path runs: ``test_fused_dispatch.py``)."""

from __future__ import annotations

import os

import pytest
import torch
from fused_checks import close, weighted_grads
from palimpsa.kernels.readout import gated_rms_norm, reference_readout

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_kernels = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()),
                                   reason="Triton kernels need a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def operands(batch=2, length=5, heads=4, head_dim=6, dtype=torch.bfloat16, scan_dtype=torch.float32,
             d_per_head=True, seed=0):
    """The readout's operands as the mixer has them: ``x`` and ``z`` strided views of wider activations (the
    convolution's and ``in_proj``'s outputs), ``y`` the scan's float32 output, ``D`` and the weight parameters in the
    model's dtype; the leaves, all requiring gradients."""
    gen = torch.Generator().manual_seed(seed)
    channels = heads * head_dim
    wide_x = torch.randn(batch, length, channels + 7, generator=gen).to(dtype)
    wide_z = (2 * torch.randn(batch, length, channels + 3, generator=gen)).to(dtype)
    y = torch.randn(batch, length, heads, head_dim, generator=gen).to(scan_dtype)
    D = (1 + torch.rand(heads if d_per_head else channels, generator=gen)).to(dtype)
    weight = (1 + 0.5 * torch.randn(channels, generator=gen)).to(dtype)
    leaves = [t.to(DEVICE).requires_grad_(True) for t in (y, wide_x, D, wide_z, weight)]
    y, wide_x, D, wide_z, weight = leaves
    x = wide_x[..., 5:5 + channels].view(batch, length, heads, head_dim)
    z = wide_z[..., 2:2 + channels]
    return (y, x, D, z, weight), leaves


def output_and_grads(fn, ops, leaves, group_size, norm_before_gate, out_dtype):
    out = fn(*ops, 1e-5, group_size, norm_before_gate, out_dtype)
    return out, weighted_grads([out], leaves)


@needs_kernels
@pytest.mark.parametrize("dtype, scan_dtype, out_tol, grad_tol", [
    (torch.bfloat16, torch.float32, 1e-2, 1e-2),  # the training launch: bf16 output and gradients
    (torch.float32, torch.float32, 1e-6, 1e-5),
    (torch.float64, torch.float64, 1e-13, 1e-12),
])
@pytest.mark.parametrize("groups, norm_before_gate, d_per_head", [
    (1, False, True),  # every released Mamba2
    (2, False, False),  # two groups (ngroups 2), D per channel (D_has_hdim)
    (4, True, True),  # the gate after the norm
])
def test_fused_kernels_match_the_pytorch_expressions(dtype, scan_dtype, out_tol, grad_tol, groups, norm_before_gate,
                                                     d_per_head):
    from palimpsa.kernels import fused_readout

    ops, leaves = operands(dtype=dtype, scan_dtype=scan_dtype, d_per_head=d_per_head)
    group_size = ops[4].numel() // groups
    assert fused_readout.supported(*ops, group_size)
    out, grads = output_and_grads(fused_readout.fused_readout, ops, leaves, group_size, norm_before_gate, dtype)
    out_ref, grads_ref = output_and_grads(reference_readout, ops, leaves, group_size, norm_before_gate, dtype)
    assert out.dtype == dtype and out.shape == out_ref.shape
    close(out, out_ref, out_tol, "output")
    for name, got, want, leaf in zip(("y", "x", "D", "z", "weight"), grads, grads_ref, leaves, strict=True):
        assert got.dtype == leaf.dtype and got.shape == leaf.shape, name
        close(got, want, grad_tol, name)


@needs_kernels
def test_more_tokens_than_programs_and_a_group_not_a_power_of_two():
    """The backward's programs each sum the weight's and D's gradients over several tokens (and the last one over
    fewer); a group of 24 channels is held in a block of 32, its padding masked."""
    from palimpsa.kernels import fused_readout

    ops, leaves = operands(batch=3, length=7, heads=4, head_dim=6, dtype=torch.float32)  # 21 tokens, 4 programs
    out, grads = output_and_grads(fused_readout.fused_readout, ops, leaves, 24, False, torch.float32)
    out_ref, grads_ref = output_and_grads(reference_readout, ops, leaves, 24, False, torch.float32)
    close(out, out_ref, 1e-6, "output")
    for name, got, want in zip(("y", "x", "D", "z", "weight"), grads, grads_ref, strict=True):
        close(got, want, 1e-5, name)


@needs_kernels
def test_no_tokens():
    """An empty batch: an empty output, and gradients (the weight's and D's zero) from a backward that sums
    nothing."""
    from palimpsa.kernels import fused_readout

    ops, leaves = operands(batch=0, dtype=torch.float32)
    out, grads = output_and_grads(fused_readout.fused_readout, ops, leaves, 24, False, torch.float32)
    assert out.shape == (0, 5, 24)
    assert not grads[2].any() and not grads[4].any() and grads[0].shape == leaves[0].shape


def test_the_reference_is_the_mixers_skip_and_gated_norm():
    """The PyTorch path computes ``(y + D x)`` through mamba_ssm's gated RMSNorm, written out here by hand."""
    ops, _ = operands(dtype=torch.float64, scan_dtype=torch.float64, d_per_head=True)
    y, x, D, z, weight = (t.detach() for t in ops)
    s = (y + x * D[:, None]).flatten(2) * torch.nn.functional.silu(z)
    halves = s.unflatten(-1, (2, -1))
    normed = halves / torch.sqrt((halves**2).mean(-1, keepdim=True) + 1e-5)
    want = normed.flatten(-2) * weight
    got = reference_readout(y, x, D, z, weight, 1e-5, 12, False, torch.float64)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gated_rms_norm(s / torch.nn.functional.silu(z), z, weight, 1e-5, 12, False), want,
                          rtol=1e-12, atol=1e-12)


@needs_kernels
def test_operands_the_kernels_do_not_take():
    from palimpsa.kernels import fused_readout

    (y, x, D, z, weight), _ = operands(dtype=torch.float32)
    assert fused_readout.supported(y, x, D, z, weight, 24)
    assert not fused_readout.supported(y.transpose(2, 3), x, D, z, weight, 24)  # y not contiguous
    assert not fused_readout.supported(y, x.transpose(2, 3), D, z, weight, 24)  # channels not contiguous
    assert not fused_readout.supported(y, x, D[:-1], z, weight, 24)  # D neither a head's nor a channel's
    assert not fused_readout.supported(y, x, D, z[..., :-1], weight, 24)  # z does not cover H * P
    assert not fused_readout.supported(y, x, D, z, weight, 7)  # groups that do not divide H * P
    assert not fused_readout.supported(y, x, D, z, weight, 2 * 16384)  # a group too wide for a program
