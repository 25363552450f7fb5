"""A mixer's causal convolution and SiLU (``palimpsa.kernels.conv``): the fused Triton kernels under
``TRITON_INTERPRET=1`` against the PyTorch expressions, the activations and every gradient, packed rows included
(where each path runs: ``test_fused_dispatch.py``)."""

from __future__ import annotations

import os

import pytest
import torch
from fused_checks import close, weighted_grads
from palimpsa.kernels.conv import reference_conv_silu

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_kernels = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()),
                                   reason="Triton kernels need a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def operands(batch=2, length=37, channels=20, taps=4, dtype=torch.float32, bias=True, seed=0):
    """``x`` a strided split of a wider activation (as ``in_proj``'s output gives it), ``nn.Conv1d``'s filters and
    bias; the leaves, all requiring gradients."""
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(batch, length, channels + 9, generator=gen).to(dtype)
    weight = (0.5 * torch.randn(channels, 1, taps, generator=gen)).to(dtype)
    leaves = [wide, weight] + ([(0.3 * torch.randn(channels, generator=gen)).to(dtype)] if bias else [])
    leaves = [t.to(DEVICE).requires_grad_(True) for t in leaves]
    x = leaves[0][..., 4:4 + channels]
    return (x, leaves[1], leaves[2] if bias else None), leaves


def output_and_grads(fn, ops, leaves, cu_seqlens=None):
    out = fn(*ops, cu_seqlens)
    return out, weighted_grads([out], leaves)


@needs_kernels
@pytest.mark.parametrize("dtype, tol", [
    (torch.bfloat16, 2e-2),  # the training launch (PyTorch rounds the sum at every tap, the kernel once)
    (torch.float32, 1e-5),
    (torch.float64, 1e-12),
])
@pytest.mark.parametrize("taps, bias", [(4, True), (3, False)])
def test_fused_kernels_match_the_pytorch_expressions(dtype, tol, taps, bias):
    from palimpsa.kernels import fused_conv

    ops, leaves = operands(taps=taps, dtype=dtype, bias=bias)
    assert fused_conv.supported(*ops, None)
    out, grads = output_and_grads(fused_conv.fused_conv_silu, ops, leaves)
    out_ref, grads_ref = output_and_grads(reference_conv_silu, ops, leaves)
    assert out.dtype == dtype and out.shape == out_ref.shape
    close(out, out_ref, tol, "output")
    for name, got, want, leaf in zip(("x", "weight", "bias"), grads, grads_ref, leaves):
        assert got.dtype == leaf.dtype and got.shape == leaf.shape, name
        close(got, want, tol, name)


@needs_kernels
def test_packed_sequences_do_not_reach_across_their_starts():
    """A packed row (``cu_seqlens``): sequences of 1, 2, 5, 30 and 7 tokens, the shortest shorter than the filter;
    the kernels agree with the PyTorch path, which zeroes every tap across a start, and with the sequences run one by
    one."""
    from palimpsa.kernels import fused_conv

    ops, leaves = operands(batch=1, length=45)
    cu_seqlens = torch.tensor([0, 1, 3, 8, 38, 45], device=DEVICE, dtype=torch.int32)
    out, grads = output_and_grads(fused_conv.fused_conv_silu, ops, leaves, cu_seqlens)
    out_ref, grads_ref = output_and_grads(reference_conv_silu, ops, leaves, cu_seqlens)
    close(out, out_ref, 1e-6, "output")
    for name, got, want in zip(("x", "weight", "bias"), grads, grads_ref, strict=True):
        close(got, want, 1e-5, name)
    x, weight, bias = ops
    bounds = cu_seqlens.tolist()
    alone = torch.cat([fused_conv.fused_conv_silu(x[:, a:b], weight, bias, None) for a, b in zip(bounds, bounds[1:])],
                      1)
    close(out, alone, 1e-6, "sequences one by one")


@needs_kernels
def test_backward_programs_walk_several_tiles(monkeypatch):
    """With fewer backward programs along the tokens than tiles, each walks several tiles (the last one partly past
    the end) and sums their filters' and bias's gradients: the same gradients."""
    from palimpsa.kernels import fused_conv

    ops, leaves = operands(batch=3, length=90)  # 270 tokens: 5 tiles of 60, rows of 90 spanning tile ends
    want = output_and_grads(reference_conv_silu, ops, leaves)
    monkeypatch.setattr(fused_conv, "ROW_PROGRAMS", 2)  # 2 programs of 3 tiles (the last one past the end)
    got = output_and_grads(fused_conv.fused_conv_silu, ops, leaves)
    close(got[0], want[0], 1e-6, "output")
    for name, g, w in zip(("x", "weight", "bias"), got[1], want[1], strict=True):
        close(g, w, 1e-5, name)


@needs_kernels
def test_a_backward_tile_too_short_for_its_taps_is_refused(monkeypatch):
    """A tile must write some tokens beside the ones its taps read after them (``BWD_TILE``'s tokens above the taps
    less one, rounded up to a power of two): one that cannot is refused by name instead of launching nothing."""
    from palimpsa.kernels import fused_conv

    ops, leaves = operands(taps=4)
    monkeypatch.setattr(fused_conv, "BWD_TILE", (4, 16, 1))
    out = fused_conv.fused_conv_silu(*ops, None)
    with pytest.raises(ValueError, match="BWD_TILE takes 4 tokens a tile"):
        out.sum().backward()


@needs_kernels
def test_operands_the_kernels_do_not_take():
    from palimpsa.kernels import fused_conv

    (x, weight, bias), _ = operands()
    starts = torch.tensor([0, 37], device=DEVICE)
    assert fused_conv.supported(x, weight, bias, None) and fused_conv.supported(x[:1], weight, bias, starts)
    assert not fused_conv.supported(x.transpose(1, 2), weight, bias, None)  # channels not contiguous
    assert not fused_conv.supported(x, weight[:-1], bias, None)  # filters that do not cover the channels
    assert not fused_conv.supported(x, torch.zeros(20, 1, 9, device=DEVICE), bias, None)  # more than 8 taps
    assert not fused_conv.supported(x, weight, bias[:-1], None)  # a bias that does not cover them
    assert not fused_conv.supported(x, weight, bias, starts)  # packed rows come one row at a time
    assert not fused_conv.supported(x[:1], weight, bias, starts.to(torch.int16))  # starts as int32 or int64
