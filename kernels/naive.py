"""Sequential reference of the Palimpsa scan: one time step at a time, the ground truth for every other path.

It follows palimpsa-math (the ``M = I * mu`` form) literally and is meant to be read, not to be fast. It
handles one packed-free batch; ``palimpsa_scan`` splits ``cu_seqlens`` batches before calling it.
"""

from __future__ import annotations

import torch


def state_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """States accumulate in float32, or float64 when the inputs are float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def naive_palimpsa_scan(
    v: torch.Tensor,
    k: torch.Tensor,
    q: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor | None,
    importance_prior: float,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Run the recurrence token by token.

    Args:
        v: ``[B, T, H, P]`` values ``v* = dt * x``.
        k, q: ``[B, T, G, N]`` keys and queries, head ``h`` reads group ``h // (H // G)``.
        log_decay: ``[B, T, H]``, ``dt * A <= 0``.
        beta: ``[B, T, H, P]`` importance gains ``>= 0``, or None for zero gain.
        importance_prior: the prior precision ``I_prior > 0``.
        initial_state: ``(M0, I0)``, each ``[B, H, P, N]``, or None for ``(0, I_prior)``; ``I0`` None means
            ``I_prior``.

    Returns:
        ``y`` ``[B, T, H, P]`` in the state dtype, the final ``(M_T, I_T)``, and the readout uncertainty
        ``[B, T, H, P]`` in the state dtype.
    """
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    dtype = state_dtype_for(v.dtype)
    heads_per_group = heads // groups
    k_heads = k.to(dtype).repeat_interleave(heads_per_group, dim=2)
    q_heads = q.to(dtype).repeat_interleave(heads_per_group, dim=2)
    if initial_state is None:
        memory = v.new_zeros(batch, heads, head_dim, state_size, dtype=dtype)
        importance = torch.full_like(memory, importance_prior)
    else:
        memory = initial_state[0].to(dtype)
        importance = (torch.full_like(memory, importance_prior) if initial_state[1] is None
                      else initial_state[1].to(dtype))
    ys, uncertainties = [], []
    for t in range(length):
        alpha = log_decay[:, t].to(dtype).exp()[:, :, None, None]
        key = k_heads[:, t, :, None, :]
        memory = alpha * memory + v[:, t].to(dtype)[..., None] * key
        importance = alpha * importance + (1 - alpha) * importance_prior
        if beta is not None:
            importance = importance + beta[:, t].to(dtype)[..., None] * key * key
        query = q_heads[:, t, :, None, :]
        ys.append(((memory / importance) * query).sum(-1))
        uncertainties.append((query * query / importance).sum(-1))
    return torch.stack(ys, 1), (memory, importance), torch.stack(uncertainties, 1)
