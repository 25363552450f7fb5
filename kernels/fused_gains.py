"""Triton kernels of ``gains.scan_values_and_gains``: ``v = x * dt`` and ``beta = sigmoid(gate) * factor`` in one
pass over ``[B, L, H, P]``, and their gradients in one more.

What they replace (measured in ``bench_train.py --profile``): PyTorch builds ``v`` and ``beta`` from an upcast
copy, a sigmoid and two products, each a kernel that reads and writes the whole ``[B, L, H, P]`` tensor in float32,
and autograd runs as many again backward, all of it a second time where activation checkpointing recomputes the
block. Here the forward reads ``x`` and the gate in their own dtypes (16-bit in training) once and writes ``v`` and
``beta``; the backward reads ``dv``, ``dbeta``, ``x`` and the gate once and writes ``dx`` and ``dgate`` in their
inputs' dtypes, with the sums over a head's channels that ``dt`` and ``factor`` receive (``[B, L, H]``; what
feeds ``factor``, the gain's parameters and ``1 - a_t``, is small and stays with autograd).

Both are operators of the dispatcher (``torch.ops.palimpsa.scan_values_and_gains``), so that torch.compile and
selective activation checkpointing see them as one op each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fused_recurrent import FP_FUSION, _acc_dtype, _state_dtype, on_device

ROWS = 32  # tokens per program; a program takes one head's P channels of them


@triton.jit
def _tile(rows, n_rows, L, i_h, stride_b, stride_l, H: tl.constexpr, P: tl.constexpr, BP: tl.constexpr):
    """Offsets of a strided ``[B, L, H * P]`` operand's tile (token rows x one head's channels), the same tile's
    offsets in a contiguous ``[B, L, H, P]`` tensor and in a ``[B, L, H]`` one, and the masks."""
    o_p = tl.arange(0, BP)
    m_r = rows < n_rows
    m = m_r[:, None] & (o_p[None, :] < P)
    rows64 = rows.to(tl.int64)
    o_in = (rows64 // L) * stride_b + (rows64 % L) * stride_l + i_h * P
    o_out = (rows64 * H + i_h) * P
    return o_in[:, None] + o_p[None, :], o_out[:, None] + o_p[None, :], rows64 * H + i_h, m_r, m


@triton.jit
def gains_fwd_kernel(x, dt, gate, factor, v, beta, n_rows, L, sx_b, sx_l, sg_b, sg_l,
                     H: tl.constexpr, P: tl.constexpr, BP: tl.constexpr, BT: tl.constexpr, ACC: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    rows = i_t * BT + tl.arange(0, BT)
    o_x, o_o, o_h, m_r, m = _tile(rows, n_rows, L, i_h, sx_b, sx_l, H, P, BP)
    o_g = _tile(rows, n_rows, L, i_h, sg_b, sg_l, H, P, BP)[0]
    b_dt = tl.load(dt + o_h, mask=m_r, other=0).to(ACC)
    b_f = tl.load(factor + o_h, mask=m_r, other=0).to(ACC)
    b_x = tl.load(x + o_x, mask=m, other=0).to(ACC)
    tl.store(v + o_o, (b_x * b_dt[:, None]).to(v.dtype.element_ty), mask=m)
    b_s = 1 / (1 + tl.exp(-tl.load(gate + o_g, mask=m, other=0).to(ACC)))
    tl.store(beta + o_o, (b_s * b_f[:, None]).to(beta.dtype.element_ty), mask=m)


@triton.jit
def gains_bwd_kernel(x, dt, gate, factor, dv, dbeta, dx, ddt, dgate, dfactor, n_rows, L, sx_b, sx_l, sg_b, sg_l,
                     H: tl.constexpr, P: tl.constexpr, BP: tl.constexpr, BT: tl.constexpr, ACC: tl.constexpr,
                     HAS_DV: tl.constexpr, HAS_DBETA: tl.constexpr):
    """``dx = dv dt``, ``ddt = sum_p dv x``; ``dgate = dbeta factor s (1 - s)``, ``dfactor = sum_p dbeta s`` with
    ``s = sigmoid(gate)``; ``dx`` and ``dgate`` contiguous, in ``x``'s and the gate's dtypes."""
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    rows = i_t * BT + tl.arange(0, BT)
    o_x, o_o, o_h, m_r, m = _tile(rows, n_rows, L, i_h, sx_b, sx_l, H, P, BP)
    if HAS_DV:
        b_dv = tl.load(dv + o_o, mask=m, other=0).to(ACC)
        b_dt = tl.load(dt + o_h, mask=m_r, other=0).to(ACC)
        b_x = tl.load(x + o_x, mask=m, other=0).to(ACC)
        tl.store(dx + o_o, (b_dv * b_dt[:, None]).to(dx.dtype.element_ty), mask=m)
        tl.store(ddt + o_h, tl.sum(b_dv * b_x, 1).to(ddt.dtype.element_ty), mask=m_r)
    if HAS_DBETA:
        o_g = _tile(rows, n_rows, L, i_h, sg_b, sg_l, H, P, BP)[0]
        b_db = tl.load(dbeta + o_o, mask=m, other=0).to(ACC)
        b_f = tl.load(factor + o_h, mask=m_r, other=0).to(ACC)
        b_s = 1 / (1 + tl.exp(-tl.load(gate + o_g, mask=m, other=0).to(ACC)))
        tl.store(dgate + o_o, (b_db * b_f[:, None] * b_s * (1 - b_s)).to(dgate.dtype.element_ty), mask=m)
        tl.store(dfactor + o_h, tl.sum(b_db * b_s, 1).to(dfactor.dtype.element_ty), mask=m_r)


def supported(x, dt, gate, factor) -> bool:
    """Whether the kernels take these operands as they are (else the PyTorch expressions run): ``x`` ``[B, L, H,
    P]`` with each token's heads and channels contiguous, the gate ``[B, L, H * P]`` or ``[B, L, H, P]`` likewise,
    ``dt`` and ``factor`` ``[B, L, H]`` in the output's dtype, all on one device, and no more than 2^31 tokens."""
    if x.dim() != 4 or gate is None or factor is None:
        return False
    batch, length, heads, head_dim = x.shape
    out = _state_dtype(x.dtype)
    return (x.stride(3) == 1 and x.stride(2) == head_dim and gate.shape[:2] == (batch, length)
            and gate.shape[2:].numel() == heads * head_dim and gate.stride(-1) == 1
            and (gate.dim() == 3 or gate.stride(2) == head_dim)
            and dt.shape == factor.shape == (batch, length, heads) and dt.dtype == factor.dtype == out
            and gate.is_floating_point() and len({t.device for t in (x, dt, gate, factor)}) == 1
            and batch * length < 2**31)


def _launch_args(x, gate):
    batch, length, heads, head_dim = x.shape
    grid = (triton.cdiv(batch * length, ROWS), heads)
    strides = (x.stride(0), x.stride(1), gate.stride(0), gate.stride(1))
    return grid, (batch * length, length, *strides), {"H": heads, "P": head_dim,
                                                       "BP": triton.next_power_of_2(head_dim), "BT": ROWS}


@torch.library.custom_op("palimpsa::scan_values_and_gains", mutates_args=())
def _values_and_gains_op(x: torch.Tensor, dt: torch.Tensor, gate: torch.Tensor,
                         factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = _state_dtype(x.dtype)
    v = torch.empty(x.shape, dtype=out, device=x.device)
    beta = torch.empty(x.shape, dtype=out, device=x.device)
    grid, scalars, sizes = _launch_args(x, gate)
    with on_device(x):
        gains_fwd_kernel[grid](x, dt.contiguous(), gate, factor.contiguous(), v, beta, *scalars, **sizes,
                               ACC=_acc_dtype(out), num_warps=4, **FP_FUSION)
    return v, beta


@_values_and_gains_op.register_fake
def _values_and_gains_fake(x, dt, gate, factor):
    out = _state_dtype(x.dtype)
    return x.new_empty(x.shape, dtype=out), x.new_empty(x.shape, dtype=out)


@torch.library.custom_op("palimpsa::scan_values_and_gains_backward", mutates_args=())
def _values_and_gains_backward_op(
    x: torch.Tensor, dt: torch.Tensor, gate: torch.Tensor, factor: torch.Tensor, dv: torch.Tensor | None,
    dbeta: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``dx, ddt, dgate, dfactor`` (empty where the output gradient they come from is None)."""
    has_dv, has_dbeta = dv is not None, dbeta is not None
    out = _state_dtype(x.dtype)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if has_dv else x.new_empty(0)
    ddt = torch.empty(dt.shape, dtype=dt.dtype, device=x.device) if has_dv else x.new_empty(0)
    dgate = torch.empty(gate.shape, dtype=gate.dtype, device=x.device) if has_dbeta else x.new_empty(0)
    dfactor = torch.empty(factor.shape, dtype=factor.dtype, device=x.device) if has_dbeta else x.new_empty(0)
    if has_dv or has_dbeta:
        grid, scalars, sizes = _launch_args(x, gate)
        with on_device(x):
            gains_bwd_kernel[grid](x, dt.contiguous(), gate, factor.contiguous(),
                                   dv.contiguous() if has_dv else x, dbeta.contiguous() if has_dbeta else x,
                                   dx, ddt, dgate, dfactor, *scalars, **sizes, ACC=_acc_dtype(out), HAS_DV=has_dv,
                                   HAS_DBETA=has_dbeta, num_warps=4, **FP_FUSION)
    return dx, ddt, dgate, dfactor


@_values_and_gains_backward_op.register_fake
def _values_and_gains_backward_fake(x, dt, gate, factor, dv, dbeta):
    def like(tensor, present):
        return torch.empty_like(tensor) if present else x.new_empty(0)

    return like(x, dv is not None), like(dt, dv is not None), like(gate, dbeta is not None), like(
        factor, dbeta is not None)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)
    ctx.set_materialize_grads(False)


def _backward(ctx, dv, dbeta):
    x, dt, gate, factor = ctx.saved_tensors
    dx, ddt, dgate, dfactor = torch.ops.palimpsa.scan_values_and_gains_backward(x, dt, gate, factor, dv, dbeta)
    return (dx if dv is not None else None, ddt if dv is not None else None,
            dgate if dbeta is not None else None, dfactor if dbeta is not None else None)


_values_and_gains_op.register_autograd(_backward, setup_context=_setup)


def fused_values_and_gains(x, dt, gate, factor):
    """``gains.scan_values_and_gains`` through the kernels (the caller has checked :func:`supported`)."""
    return torch.ops.palimpsa.scan_values_and_gains(x, dt, gate, factor)
