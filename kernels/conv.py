"""``causal_conv_silu``: a mixer's causal depthwise convolution and its SiLU, in one pass.

Mamba2 runs its ``x``, ``B``, ``C`` channels through a short causal convolution (``d_conv`` = 4 taps, one filter a
channel) and a SiLU. In PyTorch that is a padded copy, a product and a sum a tap, and the SiLU: about ten kernels over
``[B, L, C]`` through strided views, as many again in the backward, all of it twice where activation checkpointing
recomputes the block. On a CUDA GPU with Triton one kernel computes it and one more its gradients
(``fused_conv.py``); elsewhere, and in the standalone copy of the modeling code that travels with a model's
weights, the PyTorch expressions below compute the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .gains import fused_kernels

FUSED_CONV_ENV = "PALIMPSA_FUSED_CONV"  # "0": the PyTorch expressions even where the fused kernels could run


def sequence_index(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """For a packed row of ``length`` positions, the index of the sequence each position belongs to."""
    position = torch.arange(length, device=cu_seqlens.device)
    return torch.searchsorted(cu_seqlens, position, right=True) - 1


def causal_depthwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """Causal depthwise convolution of ``x`` ``[B, L, C]`` with ``weight`` ``[C, 1, K]`` (``nn.Conv1d`` layout).

    With ``cu_seqlens`` (a packed batch) no tap reaches back across a sequence start.
    """
    length, taps = x.shape[1], weight.shape[-1]
    padded = F.pad(x, (0, 0, taps - 1, 0))
    out = torch.zeros_like(x) if bias is None else bias.to(x.dtype).expand_as(x).clone()
    if cu_seqlens is not None:
        position = torch.arange(length, device=x.device)
        starts = cu_seqlens[sequence_index(cu_seqlens, length)]
    for tap in range(taps):
        lag = taps - 1 - tap
        term = padded[:, tap : tap + length] * weight[:, 0, tap].to(x.dtype)
        if cu_seqlens is not None and lag:
            term = term * (position - lag >= starts).to(x.dtype)[None, :, None]
        out = out + term
    return out


def reference_conv_silu(x, weight, bias, cu_seqlens=None):
    """``silu(causal_depthwise_conv(x))`` in PyTorch, in ``x``'s dtype."""
    return F.silu(causal_depthwise_conv(x, weight, bias, cu_seqlens))


def _fused_conv(x: torch.Tensor):
    """The fused convolution (``fused_conv.py``) for ``x``'s device, or None (``PALIMPSA_FUSED_CONV=0``)."""
    return fused_kernels(x, "fused_conv", FUSED_CONV_ENV)


def causal_conv_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """``silu`` of the causal depthwise convolution of ``x``, ``[B, L, C]`` in ``x``'s dtype.

    Args:
        x: ``[B, L, C]``, channels contiguous inside a token (a split of ``in_proj``'s output is read in place).
        weight: ``[C, 1, K]`` one filter a channel (``nn.Conv1d``'s layout), tap ``K - 1`` on the token itself.
        bias: ``[C]`` or None.
        cu_seqlens: ``[S + 1]`` sequence starts of a packed row (``B`` = 1): no tap reaches across one.

    Returns:
        The activations with their gradients to ``x``, ``weight`` and ``bias``; on a GPU summed in float32 (float64
        for float64 inputs) and rounded once.
    """
    fused = _fused_conv(x)
    if fused is not None and fused.supported(x, weight, bias, cu_seqlens):
        return fused.fused_conv_silu(x, weight, bias, cu_seqlens)
    return reference_conv_silu(x, weight, bias, cu_seqlens)
