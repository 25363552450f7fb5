"""Shared by the scan tests: seeded random inputs of the scan op and a relative-error check."""

from __future__ import annotations

import torch


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative RMS error ``|got - want| / |want|`` in float64.

    The scale has an RMS floor of 1e-3 so that a reference that is zero up to rounding (the decay gradient of
    one token from a zero state) is compared absolutely rather than rounding noise against rounding noise.
    """
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    scale = max(want.norm().item(), 1e-3 * want.numel() ** 0.5)
    return (got - want).norm().item() / scale


def assert_close(got: torch.Tensor, want: torch.Tensor, tol: float, name: str) -> None:
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values (an unwritten output?)"
    error = relative_error(got, want)
    assert error <= tol, f"{name}: relative error {error:.3e} > {tol:.1e}"


def make_inputs(
    batch: int = 2,
    length: int = 20,
    heads: int = 4,
    groups: int = 2,
    head_dim: int = 3,
    state_size: int = 5,
    *,
    with_beta: bool = True,
    with_state: bool = True,
    n_states: int | None = None,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    requires_grad: bool = False,
    device: str = "cpu",
) -> dict:
    """Fresh random inputs; ``log_decay`` mixes decays near 1 (about -1e-4) and near 0 (about -8)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    log_decay = -rand(batch, length, heads) * 3
    pick = rand(batch, length, heads)
    log_decay = torch.where(pick < 0.2, -1e-4 * (0.5 + rand(batch, length, heads)), log_decay)
    log_decay = torch.where(pick > 0.8, -8.0 - rand(batch, length, heads), log_decay)
    n_states = batch if n_states is None else n_states
    tensors = {
        "v": randn(batch, length, heads, head_dim),
        "k": randn(batch, length, groups, state_size),
        "q": randn(batch, length, groups, state_size),
        "log_decay": log_decay,
        "beta": rand(batch, length, heads, head_dim) * 10 if with_beta else None,
        "M0": randn(n_states, heads, head_dim, state_size) if with_state else None,
        "I0": 0.5 + rand(n_states, heads, head_dim, state_size) if with_state else None,
    }
    for name, tensor in tensors.items():
        if tensor is not None:
            tensor = tensor.to(device, torch.float32 if name in ("M0", "I0") and dtype != torch.float64 else dtype)
            tensors[name] = tensor.requires_grad_(requires_grad)
    return tensors
