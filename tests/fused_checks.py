"""What the fused elementwise ops' tests share (tests/kernels/test_conv.py, test_readout.py, test_norm.py): a loss
that weighs every output element by a fixed random number, its gradients, and the relative error they are held to."""

from __future__ import annotations

import torch


def weighted_grads(outputs, leaves):
    """The gradients to ``leaves`` of ``sum(w * out)`` over ``outputs``, each weighted elementwise by fixed random
    numbers (float64)."""
    gen = torch.Generator().manual_seed(3)
    loss = sum((out.double() * torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device)).sum()
               for out in outputs)
    return torch.autograd.grad(loss, leaves)


def close(got, want, tol, name):
    """``max |got - want| / max |want| < tol``."""
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()
    assert err < tol, f"{name}: relative error {err:.2e} >= {tol}"
