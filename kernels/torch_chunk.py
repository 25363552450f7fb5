"""Chunked PyTorch path of the Palimpsa scan, the one that runs on the CPU.

Both states follow linear recurrences with the same scalar decay (palimpsa-math section 3):

    M_t = alpha_t M_{t-1} + v_t (x) k_t
    J_t = alpha_t J_{t-1} + beta_t (x) (k_t * k_t),      I_t = I_prior + J_t

so inside a chunk of ``C`` tokens every state is a decay-weighted sum of the chunk's own writes plus the
decayed state the chunk started from. Without beta the readout is linear in ``M`` and the chunk collapses to
Mamba2's quadratic "SSD" form, which never forms a ``[P, N]`` state per token. With beta the readout
``(M_t / I_t) q_t`` divides elementwise, so the chunk forms its per-token states (``C x P x N`` per head, held
only for the chunk). Gradients come from autograd.
"""

from __future__ import annotations

import torch

from .naive import state_dtype_for


def _decay_matrix(cum: torch.Tensor) -> torch.Tensor:
    """``exp(cum_t - cum_s)`` for ``s <= t``, zero above the diagonal. ``cum``: ``[B, H, C]``."""
    diff = cum[..., :, None] - cum[..., None, :]
    causal = torch.ones(diff.shape[-2:], dtype=torch.bool, device=cum.device).tril()
    # Mask before exp: above the diagonal the difference is positive and can overflow.
    return torch.where(causal, diff, torch.full_like(diff, float("-inf"))).exp()


def torch_chunk_palimpsa_scan(
    v: torch.Tensor,
    k: torch.Tensor,
    q: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor | None,
    importance_prior: float,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None,
    output_uncertainty: bool,
    chunk_size: int = 32,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor | None]:
    """Same contract as :func:`naive_palimpsa_scan`; the uncertainty is None unless asked for."""
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    per_group = heads // groups
    dtype = state_dtype_for(v.dtype)
    # Heads are viewed as [groups, heads_per_group] so that k and q are shared, never copied per head.
    v = v.to(dtype).view(batch, length, groups, per_group, head_dim)
    k = k.to(dtype)
    q = q.to(dtype)
    log_decay = log_decay.to(dtype).view(batch, length, groups, per_group)
    if beta is not None:
        beta = beta.to(dtype).view(batch, length, groups, per_group, head_dim)

    shape = (batch, groups, per_group, head_dim, state_size)
    if initial_state is None:
        memory = v.new_zeros(shape)
        excess = None  # J = I - I_prior, None while it is exactly zero
    else:
        memory = initial_state[0].to(dtype).view(shape)
        excess = None if initial_state[1] is None else initial_state[1].to(dtype).view(shape) - importance_prior

    ys, uncertainties = [], []
    for start in range(0, length, chunk_size):
        end = min(start + chunk_size, length)
        v_c, k_c, q_c = v[:, start:end], k[:, start:end], q[:, start:end]
        cum = log_decay[:, start:end].cumsum(1).permute(0, 2, 3, 1)  # [B, G, J, C]
        decay = _decay_matrix(cum)  # [B, G, J, C(t), C(s)]
        from_start = cum.exp()  # decay from the chunk's start state to token t

        if beta is None and excess is None:
            # Mamba2 SSD form: y_t = sum_s decay[t,s] (q_t . k_s) v_s + from_start_t (M0 q_t).
            scores = torch.einsum("btgn,bsgn->bgts", q_c, k_c)
            y = torch.einsum("bgjts,bgts,bsgjp->btgjp", decay, scores, v_c)
            y = y + torch.einsum("bgjt,bgjpn,btgn->btgjp", from_start, memory, q_c)
            y = y / importance_prior
            if output_uncertainty:
                inv_prior = torch.einsum("btgn->btg", q_c * q_c) / importance_prior
                uncertainties.append(inv_prior[:, :, :, None, None].expand(-1, -1, -1, per_group, head_dim))
            total = cum[..., -1]  # [B, G, J]
            memory = total.exp()[..., None, None] * memory + torch.einsum(
                "bgjs,bsgjp,bsgn->bgjpn", decay[..., -1, :], v_c, k_c
            )
        else:
            memories = torch.einsum("bgjts,bsgjp,bsgn->btgjpn", decay, v_c, k_c)
            memories = memories + torch.einsum("bgjt,bgjpn->btgjpn", from_start, memory)
            excesses = 0
            if beta is not None:
                excesses = torch.einsum("bgjts,bsgjp,bsgn->btgjpn", decay, beta[:, start:end], k_c * k_c)
            if excess is not None:
                excesses = excesses + torch.einsum("bgjt,bgjpn->btgjpn", from_start, excess)
            importance = importance_prior + excesses
            query = q_c[:, :, :, None, None, :]
            y = ((memories / importance) * query).sum(-1)
            if output_uncertainty:
                uncertainties.append((query * query / importance).sum(-1))
            memory = memories[:, -1]
            excess = excesses[:, -1]
        ys.append(y)

    y = torch.cat(ys, 1).reshape(batch, length, heads, head_dim)
    memory = memory.reshape(batch, heads, head_dim, state_size)
    if excess is None:
        importance = torch.full_like(memory, importance_prior)
    else:
        importance = excess.reshape(batch, heads, head_dim, state_size) + importance_prior
    uncertainty = torch.cat(uncertainties, 1).reshape(batch, length, heads, head_dim) if output_uncertainty else None
    return y, (memory, importance), uncertainty
