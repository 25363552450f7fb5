"""``add_rms_norm``: a block's residual sum and RMSNorm, in one pass.

Each block of a Mamba2 model adds the mixer's output before it to the residual stream and normalises the sum:
``residual = hidden + residual``, ``normed = rms_norm(residual in the weight's dtype)``, the residual kept in float32
(``residual_in_fp32``). In PyTorch that is a sum, a downcast, an upcast, the square, the mean, the reciprocal root
and two products over ``[B, L, d_model]``, as many again backward, and the forward twice under activation
checkpointing. On a CUDA GPU with Triton one kernel computes both outputs and one more their gradients
(``fused_norm.py``); elsewhere, and in the standalone copy of the modeling code that travels with a model's weights,
the PyTorch expressions below compute the same.
"""

from __future__ import annotations

import torch

from .gains import _upcast, fused_kernels

FUSED_NORM_ENV = "PALIMPSA_FUSED_NORM"  # "0": the PyTorch expressions even where the fused kernels could run


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """mamba_ssm's RMSNorm of ``x`` ``[..., C]``: computed in float32 (float64 stays float64), in ``x``'s dtype."""
    x32 = _upcast(x)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * _upcast(weight)).to(x.dtype)


def reference_add_rms_norm(hidden, residual, weight, eps, residual_in_fp32):
    """``residual = hidden (+ residual)``; ``rms_norm(residual in the weight's dtype)`` and the residual (upcast with
    ``residual_in_fp32``), in PyTorch."""
    residual = hidden if residual is None else hidden + residual
    normed = rms_norm(residual.to(weight.dtype), weight, eps)
    return normed, _upcast(residual) if residual_in_fp32 else residual


def _fused_norm(x: torch.Tensor):
    """The fused residual sum and norm (``fused_norm.py``) for ``x``'s device, or None (``PALIMPSA_FUSED_NORM=0``)."""
    return fused_kernels(x, "fused_norm", FUSED_NORM_ENV)


def add_rms_norm(hidden: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 residual_in_fp32: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A block's input: the residual stream ``hidden + residual`` (``hidden`` alone for the first block) and its
    RMSNorm.

    Args:
        hidden: ``[B, L, C]`` the previous mixer's output (the embeddings for the first block).
        residual: ``[B, L, C]`` the residual stream so far, or None.
        weight: ``[C]`` the norm's weight; the sum is rounded to its dtype before the norm, which computes in float32
            and returns that dtype.
        eps: the norm's epsilon.
        residual_in_fp32: keep the returned residual in float32.

    Returns:
        ``(normed, residual)`` with their gradients to ``hidden``, ``residual`` and ``weight``.
    """
    fused = _fused_norm(hidden)
    if fused is not None and fused.supported(hidden, residual, weight):
        return fused.fused_add_rms_norm(hidden, residual, weight, eps, residual_in_fp32)
    return reference_add_rms_norm(hidden, residual, weight, eps, residual_in_fp32)
