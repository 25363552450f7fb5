"""``palimpsa_scan``: the one public op of ``palimpsa.kernels``, its input checks and its backend dispatch."""

from __future__ import annotations

import importlib
import os
from typing import NamedTuple

import torch

from .naive import naive_palimpsa_scan
from .torch_chunk import torch_chunk_palimpsa_scan

BACKENDS = ("auto", "naive", "torch", "triton", "gluon")
# Forces what ``backend="auto"`` picks (one of BACKENDS but "auto"), e.g. ``triton`` to rule the Gluon forward
# out on a Hopper GPU, or ``gluon`` to fail loudly where it cannot run instead of falling back.
BACKEND_ENV = "PALIMPSA_SCAN_BACKEND"
GLUON_BACKWARD_ENV = "PALIMPSA_GLUON_BACKWARD"  # "1": the gluon backend runs the Gluon backward as well


class ScanOutput(NamedTuple):
    """What :func:`palimpsa_scan` and :func:`~palimpsa.kernels.palimpsa_step` return, always these three fields.

    ``y``: the readout (``[B, T, H, P]``, or ``[B, H, P]`` for a step) in ``v``'s dtype. ``final_state``: ``(M, I)``
    after the last token, each ``[S, H, P, N]`` in float32 (float64 for float64 inputs), or None when it was not
    asked for. ``uncertainty``: the readout variance, ``y``'s shape and dtype, or None when it was not asked for.
    """

    y: torch.Tensor
    final_state: tuple[torch.Tensor, torch.Tensor] | None
    uncertainty: torch.Tensor | None


def _check_inputs(v, k, q, log_decay, beta, importance_prior, initial_state, cu_seqlens, backend):
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if v.dim() != 4:
        raise ValueError(f"v must be [B, T, H, P], got shape {tuple(v.shape)}")
    batch, length, heads, head_dim = v.shape
    if length == 0:
        raise ValueError("v has no time steps (T = 0)")
    for name, tensor in (("k", k), ("q", q)):
        if tensor.dim() != 4 or tensor.shape[:2] != (batch, length):
            raise ValueError(f"{name} must be [B, T, G, N] = [{batch}, {length}, G, N], got {tuple(tensor.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"k and q must have the same shape, got {tuple(k.shape)} and {tuple(q.shape)}")
    groups = k.shape[2]
    if heads % groups:
        raise ValueError(f"the number of heads ({heads}) must be a multiple of the number of groups ({groups})")
    if log_decay.shape != (batch, length, heads):
        raise ValueError(f"log_decay must be [B, T, H] = [{batch}, {length}, {heads}], got {tuple(log_decay.shape)}")
    if beta is not None and beta.shape != v.shape:
        raise ValueError(f"beta must have v's shape {tuple(v.shape)}, got {tuple(beta.shape)}")
    if not importance_prior > 0:
        raise ValueError(f"importance_prior must be > 0, got {importance_prior}")
    for name, tensor in (("v", v), ("k", k), ("q", q), ("log_decay", log_decay), ("beta", beta)):
        if tensor is not None and not tensor.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {tensor.dtype}")
    n_states = batch
    if cu_seqlens is not None:
        if batch != 1:
            raise ValueError(f"cu_seqlens needs a packed batch with B = 1, got B = {batch}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError("cu_seqlens must be a 1-D int32/int64 tensor [0, end_1, ..., T]")
        _check_bounds(cu_seqlens, length)
        n_states = cu_seqlens.numel() - 1
    if initial_state is not None:
        if len(initial_state) != 2:
            raise ValueError("initial_state must be a pair (M0, I0)")
        expected = (n_states, heads, head_dim, k.shape[3])
        for name, state in zip(("M0", "I0"), initial_state):
            if state is None and name == "I0":
                continue
            if state is None or tuple(state.shape) != expected:
                raise ValueError(f"initial state {name} must be {list(expected)}, got {list(state.shape)}")


def _check_bounds(cu_seqlens: torch.Tensor, length: int) -> None:
    """``cu_seqlens`` must rise strictly from 0 to ``length``. Read on the host where it lives there; on a GPU the
    check is queued on the device (``torch._assert_async``), because reading the values back would make every packed
    call wait for the GPU: a bad tensor then fails at the next synchronisation, with this message."""
    message = f"cu_seqlens must rise strictly from 0 to T = {length}"
    if cu_seqlens.is_cuda:
        rising = (cu_seqlens[0] == 0) & (cu_seqlens[-1] == length) & (cu_seqlens.diff() > 0).all()
        torch._assert_async(rising, message)
        return
    bounds = cu_seqlens.tolist()
    if bounds[0] != 0 or bounds[-1] != length or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"{message}, got {bounds}")


def _fused_recurrent():
    """The Triton implementation, or None where it cannot be imported: no triton package, or a standalone copy of
    this module (export-model --standalone) that carries only the PyTorch paths. Imported by name at run time
    so that such a copy has no import of a file it lacks."""
    try:
        return importlib.import_module(".fused_recurrent", __package__).fused_recurrent_palimpsa_scan
    except ImportError:
        return None


def ops_saved_under_checkpointing() -> tuple:
    """The dispatcher operators whose outputs selective activation checkpointing should keep rather than
    recompute: the Triton scan's forward (its output and its checkpoints), or nothing without Triton."""
    try:
        return importlib.import_module(".fused_recurrent", __package__).SAVE_UNDER_CHECKPOINTING
    except ImportError:
        return ()


def _gluon_unsupported(v: torch.Tensor, k: torch.Tensor) -> str | None:
    """None where the Gluon forward runs these inputs (Hopper GPU, Triton with Gluon, supported shapes and
    dtypes), else the reason it does not."""
    try:
        return importlib.import_module(".gluon_scan", __package__).supported(v, k)
    except ImportError as error:
        return f"the Gluon module cannot be imported ({error})"


def _gluon_configs(backend: str) -> dict:
    """The Triton launcher's configs that swap in the Gluon kernels: the forward for ``gluon``, and the backward
    too where ``PALIMPSA_GLUON_BACKWARD=1`` (off by default until a GPU run has verified it); a one-token call
    runs the Triton kernels all the same (``fused_recurrent_palimpsa_scan``)."""
    if backend != "gluon":
        return {}
    configs = {"fwd_config": {"kernel": "gluon"}}
    if os.environ.get(GLUON_BACKWARD_ENV) == "1":
        configs["bwd_config"] = {"kernel": "gluon"}
    return configs


def _pick_backend(backend: str, v: torch.Tensor, k: torch.Tensor) -> str:
    """``auto``: Triton on CUDA tensors, the chunked PyTorch path elsewhere. ``PALIMPSA_SCAN_BACKEND`` overrides
    what ``auto`` picks (``gluon`` for the Gluon forward: correct on an H100, but slower than Triton so far, see
    docs/kernels.md)."""
    if backend == "auto":
        backend = os.environ.get(BACKEND_ENV) or "auto"
        if backend not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        if not v.is_cuda or _fused_recurrent() is None:
            return "torch"
        return "triton"
    if backend in ("triton", "gluon") and _fused_recurrent() is None:
        raise RuntimeError(f"backend={backend!r} needs the triton package; use backend='torch'")
    if backend == "gluon" and (reason := _gluon_unsupported(v, k)) is not None:
        raise RuntimeError(f"backend='gluon' cannot run here: {reason}; use backend='triton'")
    return backend


def _scan_one(v, k, q, log_decay, beta, importance_prior, initial_state, output_uncertainty, backend):
    if backend == "naive":
        y, final, uncertainty = naive_palimpsa_scan(v, k, q, log_decay, beta, importance_prior, initial_state)
        return y, final, uncertainty if output_uncertainty else None
    return torch_chunk_palimpsa_scan(v, k, q, log_decay, beta, importance_prior, initial_state, output_uncertainty)


def palimpsa_scan(
    v: torch.Tensor,
    k: torch.Tensor,
    q: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor | None = None,
    *,
    importance_prior: float = 1.0,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
    output_final_state: bool = False,
    output_uncertainty: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    backend: str = "auto",
) -> ScanOutput:
    """Palimpsa scan: a mean memory ``M = I * mu`` and a per-element importance ``I`` per head.

    For head ``h`` of group ``g = h // (H // G)``, at every step::

        M_t = alpha_t M_{t-1} + v_t (x) k_t
        I_t = alpha_t I_{t-1} + (1 - alpha_t) I_prior + beta_t (x) (k_t * k_t)
        y_t = (M_t / I_t) q_t                                 alpha_t = exp(log_decay_t)

    With ``beta=None`` (or zero) and ``I_prior = 1`` this is exactly Mamba2's scan.

    Args:
        v: ``[B, T, H, P]`` values, Mamba2's discretised ``dt * x``.
        k: ``[B, T, G, N]`` keys (Mamba2's ``B``), shared by the ``H / G`` heads of each group.
        q: ``[B, T, G, N]`` queries (Mamba2's ``C``), shared likewise.
        log_decay: ``[B, T, H]`` log forgetting gate ``dt * A <= 0``.
        beta: ``[B, T, H, P]`` importance gains ``>= 0``, or None for a plain Mamba2 scan.
        importance_prior: prior precision ``I_prior > 0`` that the importance relaxes towards.
        initial_state: ``(M0, I0)``, each ``[B, H, P, N]`` (``[S, H, P, N]`` with ``cu_seqlens`` of ``S``
            sequences), or None for ``(0, I_prior)``. ``I0 = None`` means ``I_prior`` everywhere (a Mamba2
            layer's carried state), which keeps the fast Mamba2 form when ``beta`` is None too.
        output_final_state: also return ``(M_T, I_T)``.
        output_uncertainty: also return the readout variance ``u_t = (1 / I_t) (q_t * q_t)``, ``[B, T, H, P]``.
        cu_seqlens: ``[S + 1]`` cumulative sequence lengths of a packed batch (``B = 1``); the state restarts at
            every sequence start.
        backend: ``"auto"``, ``"torch"`` (chunked PyTorch), ``"naive"`` (sequential reference), ``"triton"`` or
            ``"gluon"`` (the Gluon forward for Hopper GPUs with the Triton backward). ``auto`` picks ``triton``
            on CUDA tensors and ``torch`` off the GPU; the environment variable ``PALIMPSA_SCAN_BACKEND``
            overrides that choice.

    Returns:
        A :class:`ScanOutput`, always the same three fields: ``y`` ``[B, T, H, P]`` in ``v``'s dtype (no ``D`` skip
        term); ``final_state`` ``(M_T, I_T)`` in float32 (float64 for float64 inputs) if ``output_final_state``,
        else None; ``uncertainty`` in ``v``'s dtype if ``output_uncertainty``, else None.
    """
    _check_inputs(v, k, q, log_decay, beta, importance_prior, initial_state, cu_seqlens, backend)
    backend = _pick_backend(backend, v, k)
    if backend in ("triton", "gluon"):
        # one custom operator for both: the Gluon path swaps the forward launch and keeps the Triton backward
        y, final, uncertainty = _fused_recurrent()(
            v, k, q, log_decay, beta, importance_prior, initial_state, output_final_state, output_uncertainty,
            cu_seqlens, **_gluon_configs(backend),
        )
    elif cu_seqlens is None:
        y, final, uncertainty = _scan_one(
            v, k, q, log_decay, beta, importance_prior, initial_state, output_uncertainty, backend
        )
    else:
        bounds = cu_seqlens.tolist()
        pieces = []
        for index, (start, end) in enumerate(zip(bounds, bounds[1:])):
            part = slice(start, end)
            state = None if initial_state is None else tuple(
                None if s is None else s[index : index + 1] for s in initial_state)
            pieces.append(_scan_one(
                v[:, part], k[:, part], q[:, part], log_decay[:, part],
                None if beta is None else beta[:, part],
                importance_prior, state, output_uncertainty, backend,
            ))
        y = torch.cat([p[0] for p in pieces], 1)
        final = (torch.cat([p[1][0] for p in pieces]), torch.cat([p[1][1] for p in pieces]))
        uncertainty = torch.cat([p[2] for p in pieces], 1) if output_uncertainty else None

    return ScanOutput(y.to(v.dtype), final if output_final_state else None,
                      uncertainty.to(v.dtype) if output_uncertainty else None)
