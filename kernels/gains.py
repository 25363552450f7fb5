"""``scan_values_and_gains``: a Palimpsa mixer's scan inputs ``v`` and ``beta`` from its activations, in one pass.

A Palimpsa layer writes ``v_t = dt_t x_t`` into the memory and gains importance at the rate
``beta_t = sigmoid(gate_t) * factor_t`` (``factor`` is the per-head, per-token part of the gain: the learned gain,
the global scale and ``1 - a_t``; ``upgrade/model/modeling.py``). Both are ``[B, L, H, P]`` tensors in float32,
which PyTorch would build out of several elementwise kernels in the forward and again in the backward (each
reading and writing the whole tensor). On a CUDA GPU with Triton the two come out of one kernel, and their
gradients out of one more (``fused_gains.py``); elsewhere, and in the standalone copy of the modeling code that
travels with a model's weights, the PyTorch expressions below compute the same.
"""

from __future__ import annotations

import importlib
import os

import torch

FUSED_GAINS_ENV = "PALIMPSA_FUSED_GAINS"  # "0": the PyTorch expressions even where the fused kernels could run


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.dtype == torch.float64 else tensor.float()


def reference_values_and_gains(x, dt, gate, factor):
    """``v = x * dt`` and ``beta = sigmoid(gate) * factor`` in PyTorch (at least float32); ``beta`` is None without
    a gate."""
    batch, length, heads, head_dim = x.shape
    v = _upcast(x) * dt[..., None]
    if gate is None:
        return v, None
    beta = torch.sigmoid(_upcast(gate)).reshape(batch, length, heads, head_dim) * factor[..., None]
    return v, beta


def fused_kernels(x: torch.Tensor, name: str, env: str):
    """This package's Triton module ``name`` for ``x``'s device: None off CUDA, where it cannot be imported (no
    triton, or a standalone copy of these modules beside a model's weights) or where the environment variable ``env``
    is "0". Each elementwise op (here, ``readout.py``, ``conv.py``, ``norm.py``) asks it for its kernels."""
    if not x.is_cuda or os.environ.get(env, "1") == "0":
        return None
    try:
        return importlib.import_module(f".{name}", __package__)
    except ImportError:
        return None


def _fused(x: torch.Tensor):
    """The fused values and gains (``fused_gains.py``) for ``x``'s device, or None (``PALIMPSA_FUSED_GAINS=0``)."""
    return fused_kernels(x, "fused_gains", FUSED_GAINS_ENV)


def scan_values_and_gains(x: torch.Tensor, dt: torch.Tensor, gate: torch.Tensor | None,
                          factor: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The scan's values and importance gains of a mixer.

    Args:
        x: ``[B, L, H, P]`` the mixer's head inputs, any float dtype; a view whose heads and channels are
            contiguous inside a token (a split of the convolution's output) is read in place.
        dt: ``[B, L, H]`` step sizes (float32, float64 in a float64 model).
        gate: ``[B, L, H * P]`` (or ``[B, L, H, P]``) the gate's pre-activation, any float dtype, or None (a Mamba2
            layer: no ``beta``).
        factor: ``[B, L, H]`` the gain's per-head, per-token factor in ``dt``'s dtype (ignored without a gate).

    Returns:
        ``v = x * dt`` and ``beta = sigmoid(gate) * factor`` (None without a gate), ``[B, L, H, P]`` in float32
        (float64 for float64 inputs), with their gradients to every input.
    """
    fused = None if gate is None else _fused(x)
    if fused is not None and fused.supported(x, dt, gate, factor):
        return fused.fused_values_and_gains(x, dt, gate, factor)
    return reference_values_and_gains(x, dt, gate, factor)
