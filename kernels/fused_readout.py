"""Triton kernels of ``readout.mixer_readout``: a mixer's skip term and gated RMSNorm, ``norm(y + D x, z)``, in one
pass over ``[B, L, H * P]``, and their gradients in one more.

What they replace (``docs/bench/host-2026-11-29``, call 2: a block's kernels at 2.7b shapes, L = 8192): PyTorch
builds the readout from an upcast copy of ``x``, a product and a sum for the skip term, ``silu(z)``, the gate's
product, the square, the mean, the reciprocal root, two more products and a downcast, most of them reading and
writing ``L x H x P`` float32 values, some through strided views; autograd runs about twice as many backward, and
activation checkpointing runs the forward twice. Here the forward reads ``y``, ``x``, ``z`` once in their own dtypes
and writes the output in the model's; the backward reads them and the output gradient once more, writes ``dy``,
``dx``, ``dz`` in their inputs' dtypes, and sums the gradients of the norm's weight and of ``D`` over tokens in each
program's registers (one row of partial sums a program, added up by PyTorch).

Both are operators of the dispatcher (``torch.ops.palimpsa.mixer_readout``), so that torch.compile and selective
activation checkpointing see them as one op each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fused_recurrent import FP_FUSION, _acc_dtype, on_device, programs_per_gpu, split_rows

MAX_GROUP = 16384  # channels a program holds (a group of the norm): a row's vectors stay in registers
PROGRAMS_PER_SM = 4  # backward programs, each summing the weight's and D's gradients over its rows


@triton.jit
def readout_fwd_kernel(y, x, D, z, w, out, L, sx_b, sx_l, sz_b, sz_l, eps, C: tl.constexpr, G: tl.constexpr,
                       P: tl.constexpr, BG: tl.constexpr, D_PER_HEAD: tl.constexpr, NBG: tl.constexpr,
                       ACC: tl.constexpr):
    """``out = norm(y + D x, z) w`` for one token and one group of ``G`` channels (``NBG``: the gate after the
    norm)."""
    row, grp = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs = tl.arange(0, BG)
    m = offs < G
    cols = grp * G + offs
    b, t = row // L, row % L
    y_v = tl.load(y + row * C + cols, mask=m, other=0).to(ACC)
    x_v = tl.load(x + b * sx_b + t * sx_l + cols, mask=m, other=0).to(ACC)
    z_v = tl.load(z + b * sz_b + t * sz_l + cols, mask=m, other=0).to(ACC)
    d_v = tl.load(D + (cols // P if D_PER_HEAD else cols), mask=m, other=0).to(ACC)
    w_v = tl.load(w + cols, mask=m, other=0).to(ACC)
    s = y_v + x_v * d_v
    a = z_v / (1 + tl.exp(-z_v))  # silu(z)
    if not NBG:
        s = s * a
    r = 1 / tl.sqrt(tl.sum(s * s, 0) / G + eps)
    o = s * r * w_v
    if NBG:
        o = o * a
    tl.store(out + row * C + cols, o.to(out.dtype.element_ty), mask=m)


@triton.jit
def readout_bwd_kernel(y, x, D, z, w, g, dy, dx, dz, dw_part, dd_part, n_rows, rows_per_program, L, sx_b, sx_l,
                       sz_b, sz_l, eps, C: tl.constexpr, G: tl.constexpr, P: tl.constexpr, BG: tl.constexpr,
                       D_PER_HEAD: tl.constexpr, NBG: tl.constexpr, ACC: tl.constexpr):
    """The gradients of ``readout_fwd_kernel``'s output for ``rows_per_program`` tokens and one group: ``dy``,
    ``dx``, ``dz`` (contiguous), and this program's sums over its tokens of the weight's and ``D``'s per-channel
    gradients (a row of ``dw_part``, ``dd_part``)."""
    pid, grp = tl.program_id(0), tl.program_id(1)
    offs = tl.arange(0, BG)
    m = offs < G
    cols = grp * G + offs
    d_v = tl.load(D + (cols // P if D_PER_HEAD else cols), mask=m, other=0).to(ACC)
    w_v = tl.load(w + cols, mask=m, other=0).to(ACC)
    acc_w = tl.zeros([BG], dtype=ACC)
    acc_d = tl.zeros([BG], dtype=ACC)
    first = pid.to(tl.int64) * rows_per_program
    for i in range(0, rows_per_program):
        row = first + i
        mr = m & ((offs.to(tl.int64) * 0 + row) < n_rows)
        b, t = row // L, row % L
        y_v = tl.load(y + row * C + cols, mask=mr, other=0).to(ACC)
        x_v = tl.load(x + b * sx_b + t * sx_l + cols, mask=mr, other=0).to(ACC)
        z_v = tl.load(z + b * sz_b + t * sz_l + cols, mask=mr, other=0).to(ACC)
        g_v = tl.load(g + row * C + cols, mask=mr, other=0).to(ACC)
        sig = 1 / (1 + tl.exp(-z_v))
        a = z_v * sig
        s0 = y_v + x_v * d_v
        s = s0 if NBG else s0 * a
        r = 1 / tl.sqrt(tl.sum(s * s, 0) / G + eps)
        n = s * r
        if NBG:
            gn = g_v * w_v * a
            acc_w += g_v * n * a
            da = g_v * n * w_v
        else:
            gn = g_v * w_v
            acc_w += g_v * n
        ds = r * (gn - n * (tl.sum(gn * n, 0) / G))
        if NBG:
            ds0 = ds
        else:
            da = ds * s0
            ds0 = ds * a
        tl.store(dz + row * C + cols, (da * sig * (1 + z_v * (1 - sig))).to(dz.dtype.element_ty), mask=mr)
        tl.store(dy + row * C + cols, ds0.to(dy.dtype.element_ty), mask=mr)
        tl.store(dx + row * C + cols, (ds0 * d_v).to(dx.dtype.element_ty), mask=mr)
        acc_d += ds0 * x_v
    tl.store(dw_part + pid.to(tl.int64) * C + cols, acc_w, mask=m)
    tl.store(dd_part + pid.to(tl.int64) * C + cols, acc_d, mask=m)


def supported(y, x, D, z, weight, group_size) -> bool:
    """Whether the kernels take these operands as they are (else the PyTorch expressions run): ``y`` a contiguous
    ``[B, L, H, P]``, ``x`` of its shape with each token's heads and channels contiguous, ``z`` ``[B, L, H * P]``
    with contiguous channels, ``weight`` ``[H * P]`` and ``D`` ``[H]`` or ``[H * P]`` contiguous, all floating and
    on one device, groups of at most ``MAX_GROUP`` channels that divide ``H * P``, fewer than 2^31 tokens (a program
    each)."""
    if y.dim() != 4 or x.shape != y.shape or z.dim() != 3:
        return False
    batch, length, heads, head_dim = y.shape
    channels = heads * head_dim
    return (y.is_contiguous() and x.stride(3) == 1 and x.stride(2) == head_dim
            and z.shape == (batch, length, channels) and z.stride(2) == 1
            and weight.shape == (channels,) and weight.is_contiguous()
            and D.is_contiguous() and D.numel() in (heads, channels)
            and 0 < group_size <= MAX_GROUP and channels % group_size == 0
            and all(t.is_floating_point() for t in (y, x, D, z, weight)) and batch * length < 2**31
            and len({t.device for t in (y, x, D, z, weight)}) == 1)


def _acc(*tensors):
    return _acc_dtype(torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32)


def _sizes(y, D, group_size):
    batch, length, heads, head_dim = y.shape
    block = triton.next_power_of_2(group_size)
    return {"C": heads * head_dim, "G": group_size, "P": head_dim, "BG": block,
            "D_PER_HEAD": D.numel() == heads and heads * head_dim != heads,
            "num_warps": 8 if block >= 4096 else 4 if block >= 1024 else 2}


@torch.library.custom_op("palimpsa::mixer_readout", mutates_args=())
def _readout_op(y: torch.Tensor, x: torch.Tensor, D: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float,
                group_size: int, norm_before_gate: bool, out_dtype: torch.dtype) -> torch.Tensor:
    batch, length, heads, head_dim = y.shape
    out = torch.empty(batch, length, heads * head_dim, dtype=out_dtype, device=y.device)
    sizes = _sizes(y, D, group_size)
    with on_device(y):
        readout_fwd_kernel[(batch * length, sizes["C"] // group_size)](
            y, x, D, z, weight, out, length, x.stride(0), x.stride(1), z.stride(0), z.stride(1), eps, **sizes,
            NBG=norm_before_gate, ACC=_acc(y, x, z), **FP_FUSION)
    return out


@_readout_op.register_fake
def _readout_fake(y, x, D, z, weight, eps, group_size, norm_before_gate, out_dtype):
    batch, length, heads, head_dim = y.shape
    return y.new_empty(batch, length, heads * head_dim, dtype=out_dtype)


@torch.library.custom_op("palimpsa::mixer_readout_backward", mutates_args=())
def _readout_backward_op(
    y: torch.Tensor, x: torch.Tensor, D: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor,
    eps: float, group_size: int, norm_before_gate: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``dy, dx, dD, dz, dweight``, each in its input's dtype and shape (``dx``, ``dz`` contiguous)."""
    batch, length, heads, head_dim = y.shape
    rows, sizes = batch * length, _sizes(y, D, group_size)
    programs, per_program = split_rows(rows, programs_per_gpu(y, PROGRAMS_PER_SM))
    acc = torch.float64 if _acc(y, x, z) == tl.float64 else torch.float32
    dy, dx, dz = torch.empty_like(y), torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(
        z.shape, dtype=z.dtype, device=z.device)
    dw_part = torch.empty(programs, sizes["C"], dtype=acc, device=y.device)
    dd_part = torch.empty(programs, sizes["C"], dtype=acc, device=y.device)
    with on_device(y):
        readout_bwd_kernel[(programs, sizes["C"] // group_size)](
            y, x, D, z, weight, grad.contiguous(), dy, dx, dz, dw_part, dd_part, rows, per_program, length,
            x.stride(0), x.stride(1), z.stride(0), z.stride(1), eps, **sizes, NBG=norm_before_gate,
            ACC=_acc(y, x, z), **FP_FUSION)
    d_sum = dd_part.sum(0)
    if D.numel() != sizes["C"]:
        d_sum = d_sum.view(heads, head_dim).sum(-1)
    return dy, dx, d_sum.view(D.shape).to(D.dtype), dz, dw_part.sum(0).to(weight.dtype)


@_readout_backward_op.register_fake
def _readout_backward_fake(y, x, D, z, weight, grad, eps, group_size, norm_before_gate):
    return (torch.empty_like(y), torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty_like(D),
            torch.empty(z.shape, dtype=z.dtype, device=z.device), torch.empty_like(weight))


def _setup(ctx, inputs, output):
    y, x, D, z, weight, eps, group_size, norm_before_gate, _ = inputs
    ctx.save_for_backward(y, x, D, z, weight)
    ctx.settings = (eps, group_size, norm_before_gate)


def _backward(ctx, grad):
    y, x, D, z, weight = ctx.saved_tensors
    dy, dx, dD, dz, dweight = torch.ops.palimpsa.mixer_readout_backward(y, x, D, z, weight, grad, *ctx.settings)
    return dy, dx, dD, dz, dweight, None, None, None, None


_readout_op.register_autograd(_backward, setup_context=_setup)


def fused_readout(y, x, D, z, weight, eps, group_size, norm_before_gate, out_dtype):
    """``readout.mixer_readout`` through the kernels (the caller has checked :func:`supported`)."""
    return torch.ops.palimpsa.mixer_readout(y, x, D, z, weight, float(eps), int(group_size), bool(norm_before_gate),
                                            out_dtype)
