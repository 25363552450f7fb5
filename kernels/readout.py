"""``mixer_readout``: what a Mamba2 or Palimpsa mixer does to the scan's output before ``out_proj``, in one pass.

The mixer adds the skip term ``D x`` to the scan's readout ``y`` and normalises the sum with the gated RMSNorm of
mamba_ssm's ``RMSNormGated`` (one RMS per group of channels, gated by ``silu(z)``, the gate before the norm in every
released Mamba2): ``[B, L, H * P]`` float32 tensors through about a dozen elementwise kernels in PyTorch, each
reading and writing the whole tensor, as many again in the backward, and all of it twice where activation
checkpointing recomputes the block. On a CUDA GPU with Triton one kernel computes it, and one more its gradients
(``fused_readout.py``); elsewhere, and in the standalone copy of the modeling code that travels with a model's
weights, the PyTorch expressions below compute the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .gains import _upcast, fused_kernels

FUSED_READOUT_ENV = "PALIMPSA_FUSED_READOUT"  # "0": the PyTorch expressions even where the fused kernels could run


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                   norm_before_gate: bool) -> torch.Tensor:
    """mamba_ssm's gated RMSNorm of ``x`` ``[..., C]`` in float32 (float64 stays float64): one RMS per group of
    ``group_size`` channels, ``silu(z)`` multiplying before the norm (``norm_before_gate=False``) or after it."""
    x32, gate = _upcast(x), F.silu(_upcast(z))
    if not norm_before_gate:
        x32 = x32 * gate
    grouped = x32.unflatten(-1, (-1, group_size))
    grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    x32 = grouped.flatten(-2) * _upcast(weight)
    if norm_before_gate:
        x32 = x32 * gate
    return x32


def reference_readout(y, x, D, z, weight, eps, group_size, norm_before_gate, out_dtype):
    """``gated_rms_norm(y + D x, z)`` in ``out_dtype``, in PyTorch: ``y`` and ``x`` ``[B, L, H, P]``, ``D`` ``[H]``
    or ``[H * P]``, ``z`` ``[B, L, H * P]``, ``weight`` ``[H * P]``."""
    batch, length, heads, head_dim = x.shape
    skip = _upcast(D).view(-1, head_dim) if D.numel() == heads * head_dim else _upcast(D)[:, None]
    s = (_upcast(y) + _upcast(x) * skip).view(batch, length, heads * head_dim)
    return gated_rms_norm(s, z, weight, eps, group_size, norm_before_gate).to(out_dtype)


def _fused_readout(x: torch.Tensor):
    """The fused readout (``fused_readout.py``) for ``x``'s device, or None (``PALIMPSA_FUSED_READOUT=0``)."""
    return fused_kernels(x, "fused_readout", FUSED_READOUT_ENV)


def mixer_readout(y: torch.Tensor, x: torch.Tensor, D: torch.Tensor, z: torch.Tensor, weight: torch.Tensor,
                  eps: float, group_size: int, norm_before_gate: bool, out_dtype: torch.dtype) -> torch.Tensor:
    """The mixer's gated, normalised readout ``norm(y + D x, z)``, ``[B, L, H * P]`` in ``out_dtype``.

    Args:
        y: ``[B, L, H, P]`` the scan's readout (float32 in training; any float dtype).
        x: ``[B, L, H, P]`` the mixer's head inputs; a view whose heads and channels are contiguous inside a token
            (a split of the convolution's output) is read in place.
        D: ``[H]`` (one skip weight a head) or ``[H * P]`` (``D_has_hdim``).
        z: ``[B, L, H * P]`` the gate, channels contiguous inside a token (a split of ``in_proj``'s output).
        weight: ``[H * P]`` the norm's weight.
        eps, group_size, norm_before_gate: the gated RMSNorm's (``group_size`` divides ``H * P``).
        out_dtype: the output's dtype (the model's).

    Returns:
        The readout with its gradients to every tensor argument; computed in float32 (float64 for float64 inputs).
    """
    fused = _fused_readout(x)
    if fused is not None and fused.supported(y, x, D, z, weight, group_size):
        return fused.fused_readout(y, x, D, z, weight, eps, group_size, norm_before_gate, out_dtype)
    return reference_readout(y, x, D, z, weight, eps, group_size, norm_before_gate, out_dtype)
