"""``palimpsa_step``: one decoding step of the Palimpsa scan, updating the recurrent state in place."""

from __future__ import annotations

import importlib

import torch

from .scan import ScanOutput


def _fused_recurrent_step():
    """The Triton step, or None where it cannot be imported (no triton, or a standalone copy of this module)."""
    try:
        return importlib.import_module(".fused_recurrent", __package__).fused_recurrent_palimpsa_step
    except ImportError:
        return None


def _torch_step(v, k, q, log_decay, beta, state, importance_prior, output_uncertainty):
    memory, importance = state
    heads, groups = v.shape[1], k.shape[1]
    dtype = memory.dtype
    key = k.to(dtype).repeat_interleave(heads // groups, dim=1)[:, :, None, :]
    query = q.to(dtype).repeat_interleave(heads // groups, dim=1)[:, :, None, :]
    alpha = log_decay.to(dtype).exp()[:, :, None, None]
    memory.mul_(alpha).add_(v.to(dtype)[..., None] * key)
    importance.mul_(alpha).add_((1 - alpha) * importance_prior)
    if beta is not None:
        importance.add_(beta.to(dtype)[..., None] * key * key)
    y = ((memory / importance) * query).sum(-1).to(v.dtype)
    u = (query * query / importance).sum(-1).to(v.dtype) if output_uncertainty else None
    return y, u


@torch.no_grad()
def palimpsa_step(
    v: torch.Tensor,
    k: torch.Tensor,
    q: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor | None,
    state: tuple[torch.Tensor, torch.Tensor],
    *,
    importance_prior: float = 1.0,
    output_uncertainty: bool = False,
) -> ScanOutput:
    """Advance ``(M, I)`` by one token for a batch of sequences, in place (for generation; no autograd).

    Computes exactly one step of :func:`palimpsa_scan`: ``M = a M + v (x) k``,
    ``I = a I + (1 - a) I_prior + beta (x) (k * k)``, ``y = (M / I) q``.

    Args:
        v: ``[B, H, P]`` values of the new token.
        k, q: ``[B, G, N]`` its key and query, shared by the ``H / G`` heads of a group.
        log_decay: ``[B, H]``.
        beta: ``[B, H, P]`` importance gains, or None.
        state: ``(M, I)``, each ``[B, H, P, N]`` float32 (or float64), contiguous; updated in place.
        importance_prior: ``I_prior > 0``.
        output_uncertainty: also return ``u = (1 / I) (q * q)``.

    Returns:
        A :class:`~palimpsa.kernels.ScanOutput`: ``y`` ``[B, H, P]`` in ``v``'s dtype, ``final_state`` the ``state``
        tensors (advanced in place), ``uncertainty`` ``[B, H, P]`` or None when not asked for.
    """
    memory, importance = state
    batch, heads, head_dim = v.shape
    if k.dim() != 3 or k.shape != q.shape or k.shape[0] != batch or heads % k.shape[1]:
        raise ValueError(f"k and q must be [B, G, N] with G dividing H, got {tuple(k.shape)} and {tuple(q.shape)}")
    expected = (batch, heads, head_dim, k.shape[2])
    if tuple(memory.shape) != expected or tuple(importance.shape) != expected:
        raise ValueError(f"state tensors must be {list(expected)}, got {list(memory.shape)}, {list(importance.shape)}")
    if not (memory.is_contiguous() and importance.is_contiguous()):
        raise ValueError("state tensors must be contiguous: they are updated in place")
    if memory.dtype not in (torch.float32, torch.float64) or importance.dtype != memory.dtype:
        raise ValueError("state tensors must both be float32 (or float64)")
    if log_decay.shape != (batch, heads) or (beta is not None and beta.shape != v.shape):
        raise ValueError("log_decay must be [B, H] and beta (if given) [B, H, P]")
    if not importance_prior > 0:
        raise ValueError(f"importance_prior must be > 0, got {importance_prior}")
    fused = _fused_recurrent_step() if v.is_cuda else None
    if fused is not None:
        y, u = fused(v, k, q, log_decay, beta, state, importance_prior, output_uncertainty)
    else:
        y, u = _torch_step(v, k, q, log_decay, beta, state, importance_prior, output_uncertainty)
    return ScanOutput(y, state, u)
