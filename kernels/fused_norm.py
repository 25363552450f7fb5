"""Triton kernels of ``norm.add_rms_norm``: a block's residual sum and RMSNorm in one pass over ``[B, L, C]``, and
their gradients in one more.

What they replace (``docs/bench/host-2026-11-29``): PyTorch's sum, downcast, upcast, square, mean, reciprocal root
and two products, each a kernel that reads and writes ``[B, L, d_model]`` (most in float32), about as many backward,
and the forward twice under activation checkpointing. Here the forward reads ``hidden`` and ``residual`` once and
writes the normalised activations and the new residual; the backward reads them, the weight and both output
gradients once, writes the input gradients and sums the weight's gradient over each program's tokens in registers
(one row of partial sums a program, added up by PyTorch).

Both are operators of the dispatcher (``torch.ops.palimpsa.add_rms_norm``), so that torch.compile and activation
checkpointing see them as one op each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fused_recurrent import FP_FUSION, on_device, programs_per_gpu, split_rows

MAX_CHANNELS = 16384  # a token's channels a program holds in registers
PROGRAMS_PER_SM = 4  # backward programs, each summing the weight's gradient over its tokens


@triton.jit
def add_norm_fwd_kernel(h, res, w, out, res_out, eps, C: tl.constexpr, BC: tl.constexpr, HAS_RES: tl.constexpr,
                        SUM: tl.constexpr, ACC: tl.constexpr):
    """One token: ``r = h (+ res)`` rounded to ``SUM`` (``h + res`` promotes) and stored as ``res_out`` in its own
    dtype, then ``out = x rsqrt(mean(x^2) + eps) w`` with ``x`` = ``r`` rounded to the weight's dtype."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BC)
    m = cols < C
    r = tl.load(h + row * C + cols, mask=m, other=0).to(ACC)
    if HAS_RES:
        r = r + tl.load(res + row * C + cols, mask=m, other=0).to(ACC)
        r = r.to(SUM).to(ACC)
    tl.store(res_out + row * C + cols, r.to(res_out.dtype.element_ty), mask=m)
    x = r.to(w.dtype.element_ty).to(ACC)
    w_v = tl.load(w + cols, mask=m, other=0).to(ACC)
    rstd = 1 / tl.sqrt(tl.sum(x * x, 0) / C + eps)
    tl.store(out + row * C + cols, (x * rstd * w_v).to(out.dtype.element_ty), mask=m)


@triton.jit
def add_norm_bwd_kernel(h, res, w, g, g_res, dh, dres, dw_part, n_rows, rows_per_program, eps, C: tl.constexpr,
                        BC: tl.constexpr, HAS_RES: tl.constexpr, HAS_G_RES: tl.constexpr, SUM: tl.constexpr,
                        ACC: tl.constexpr):
    """The gradients of ``add_norm_fwd_kernel``'s outputs for ``rows_per_program`` tokens: ``dr = dx + g_res`` (the
    rounding to the weight's dtype passes gradients through) into ``dh`` and ``dres``, and this program's sum over its
    tokens of the weight's gradient (a row of ``dw_part``)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BC)
    m = cols < C
    w_v = tl.load(w + cols, mask=m, other=0).to(ACC)
    acc_w = tl.zeros([BC], dtype=ACC)
    first = pid.to(tl.int64) * rows_per_program
    for i in range(0, rows_per_program):
        row = first + i
        mr = m & ((cols.to(tl.int64) * 0 + row) < n_rows)
        r = tl.load(h + row * C + cols, mask=mr, other=0).to(ACC)
        if HAS_RES:
            r = (r + tl.load(res + row * C + cols, mask=mr, other=0).to(ACC)).to(SUM).to(ACC)
        x = r.to(w.dtype.element_ty).to(ACC)
        gv = tl.load(g + row * C + cols, mask=mr, other=0).to(ACC)
        rstd = 1 / tl.sqrt(tl.sum(x * x, 0) / C + eps)
        n = x * rstd
        acc_w += gv * n
        gn = gv * w_v
        # (the norm's input gradient in the weight's dtype, as the rounding before the norm passes it back)
        dr = (rstd * (gn - n * (tl.sum(gn * n, 0) / C))).to(w.dtype.element_ty).to(ACC)
        if HAS_G_RES:
            dr += tl.load(g_res + row * C + cols, mask=mr, other=0).to(ACC)
        tl.store(dh + row * C + cols, dr.to(dh.dtype.element_ty), mask=mr)
        if HAS_RES:
            tl.store(dres + row * C + cols, dr.to(dres.dtype.element_ty), mask=mr)
    tl.store(dw_part + pid.to(tl.int64) * C + cols, acc_w, mask=m)


def supported(hidden, residual, weight) -> bool:
    """Whether the kernels take these operands as they are (else the PyTorch expressions run): contiguous ``hidden``
    (and ``residual`` of its shape) and ``[C]`` weight, 16-bit or float32, on one device, at most ``MAX_CHANNELS``
    channels, fewer than 2^31 tokens (a program each)."""
    tensors = [hidden, weight] + ([] if residual is None else [residual])
    kinds = (torch.float16, torch.bfloat16, torch.float32)
    return (hidden.dim() >= 2 and 0 < hidden.shape[-1] <= MAX_CHANNELS and weight.shape == (hidden.shape[-1],)
            and (residual is None or residual.shape == hidden.shape)
            and all(t.is_contiguous() and t.dtype in kinds for t in tensors)
            and hidden.numel() // hidden.shape[-1] < 2**31
            and len({t.device for t in tensors}) == 1)


def _sum_dtype(hidden, residual):
    return hidden.dtype if residual is None else torch.promote_types(hidden.dtype, residual.dtype)


def _out_dtype(hidden, residual, residual_in_fp32):
    return torch.float32 if residual_in_fp32 else _sum_dtype(hidden, residual)


TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


def _warps(block):
    return 8 if block >= 4096 else 4 if block >= 1024 else 2


@torch.library.custom_op("palimpsa::add_rms_norm", mutates_args=())
def _add_norm_op(hidden: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 residual_in_fp32: bool) -> tuple[torch.Tensor, torch.Tensor]:
    channels = hidden.shape[-1]
    out = torch.empty(hidden.shape, dtype=weight.dtype, device=hidden.device)
    res_out = torch.empty(hidden.shape, dtype=_out_dtype(hidden, residual, residual_in_fp32), device=hidden.device)
    block = triton.next_power_of_2(channels)
    with on_device(hidden):
        add_norm_fwd_kernel[(hidden.numel() // channels,)](
            hidden, hidden if residual is None else residual, weight, out, res_out, eps, C=channels, BC=block,
            HAS_RES=residual is not None, SUM=TL_DTYPES[_sum_dtype(hidden, residual)], ACC=tl.float32,
            num_warps=_warps(block), **FP_FUSION)
    return out, res_out


@_add_norm_op.register_fake
def _add_norm_fake(hidden, residual, weight, eps, residual_in_fp32):
    return (torch.empty(hidden.shape, dtype=weight.dtype, device=hidden.device),
            torch.empty(hidden.shape, dtype=_out_dtype(hidden, residual, residual_in_fp32), device=hidden.device))


@torch.library.custom_op("palimpsa::add_rms_norm_backward", mutates_args=())
def _add_norm_backward_op(hidden: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, grad: torch.Tensor,
                          grad_residual: torch.Tensor | None, eps: float
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``dhidden``, ``dresidual`` (empty without a residual) and ``dweight``, each in its input's dtype."""
    channels = hidden.shape[-1]
    rows = hidden.numel() // channels
    programs, per_program = split_rows(rows, programs_per_gpu(hidden, PROGRAMS_PER_SM))
    block = triton.next_power_of_2(channels)
    dh = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device)
    dres = hidden.new_empty(0) if residual is None else torch.empty(hidden.shape, dtype=residual.dtype,
                                                                     device=hidden.device)
    dw_part = torch.empty(programs, channels, dtype=torch.float32, device=hidden.device)
    with on_device(hidden):
        add_norm_bwd_kernel[(programs,)](
            hidden, hidden if residual is None else residual, weight, grad.contiguous(),
            grad if grad_residual is None else grad_residual.contiguous(), dh, dres if residual is not None else dh,
            dw_part, rows, per_program, eps, C=channels, BC=block, HAS_RES=residual is not None,
            HAS_G_RES=grad_residual is not None, SUM=TL_DTYPES[_sum_dtype(hidden, residual)], ACC=tl.float32,
            num_warps=_warps(block), **FP_FUSION)
    return dh, dres, dw_part.sum(0).to(weight.dtype)


@_add_norm_backward_op.register_fake
def _add_norm_backward_fake(hidden, residual, weight, grad, grad_residual, eps):
    return (torch.empty_like(hidden), hidden.new_empty(0) if residual is None else torch.empty_like(residual),
            torch.empty_like(weight))


def _setup(ctx, inputs, output):
    hidden, residual, weight, eps, _ = inputs
    ctx.save_for_backward(hidden, residual, weight)
    ctx.eps = eps
    ctx.set_materialize_grads(False)


def _backward(ctx, grad, grad_residual):
    hidden, residual, weight = ctx.saved_tensors
    if grad is None:
        grad = torch.zeros(hidden.shape, dtype=weight.dtype, device=hidden.device)
    dh, dres, dweight = torch.ops.palimpsa.add_rms_norm_backward(hidden, residual, weight, grad, grad_residual,
                                                                 ctx.eps)
    return dh, None if residual is None else dres, dweight, None, None


_add_norm_op.register_autograd(_backward, setup_context=_setup)


def fused_add_rms_norm(hidden, residual, weight, eps, residual_in_fp32):
    """``norm.add_rms_norm`` through the kernels (the caller has checked :func:`supported`)."""
    return torch.ops.palimpsa.add_rms_norm(hidden, residual, weight, float(eps), bool(residual_in_fp32))
