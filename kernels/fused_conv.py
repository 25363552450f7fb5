"""Triton kernels of ``conv.causal_conv_silu``: a mixer's causal depthwise convolution and its SiLU in one pass over
``[B, L, C]``, and their gradients in one more.

What they replace (``docs/bench/host-2026-11-29``, call 3: a block's kernels at 2.7b shapes, L = 8192): PyTorch pads
a copy of the input, then a tap at a time multiplies a strided slice by the tap's weights and adds it to the sum, in
the input's dtype (16 bits in training, rounded at every tap), then applies the SiLU; autograd runs about as many
kernels backward, and activation checkpointing runs the forward twice. Here the forward reads each token's inputs
(the taps' overlapping rows come from the cache) and writes the activations once, summed in float32; the backward
computes each token's ``du = g silu'(u)`` once (in tiles that overlap by the ``K - 1`` tokens, rounded up to a power
of two, whose ``du`` the tile's last ``dx`` reads), writes ``dx`` and sums the filters' and the bias's gradients over
each program's tokens (one row of partial sums a program, ``ROW_PROGRAMS`` programs along the tokens at most, added up
by PyTorch).

Both are operators of the dispatcher (``torch.ops.palimpsa.causal_conv_silu``), so that torch.compile and selective
activation checkpointing see them as one op each.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fused_recurrent import FP_FUSION, _acc_dtype, on_device, split_rows

MAX_TAPS = 8
FWD_TILE = (32, 128)  # tokens x channels a program
BWD_TILE = (64, 64, 4)  # tokens x channels a backward tile, warps a program
ROW_PROGRAMS = 512  # backward programs along the tokens at most, beyond which each walks several tiles: the filters'
# and bias's partial sums stay [ROW_PROGRAMS, C, K] however long the input (44 MB at 2.7b shapes)


@triton.jit
def _positions(pos, t, ok, HAS_POS: tl.constexpr):
    """Each token's position in its sequence: its index in the row, or (packed) the index less its sequence's
    start."""
    if HAS_POS:
        return tl.load(pos + t, mask=ok, other=0).to(tl.int64)
    return t


@triton.jit
def _tile(i_t, pos, n_rows, L, C, BT: tl.constexpr, BC: tl.constexpr, HAS_POS: tl.constexpr, STRIDE: tl.constexpr):
    """Tile ``i_t`` of the tokens (``BT`` rows of the flattened ``[B * L]`` from ``i_t * STRIDE``) and the program's
    channels: their masks, each token's sequence row and index in it, and its position in its sequence."""
    rows = i_t.to(tl.int64) * STRIDE + tl.arange(0, BT)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    mr, mc = rows < n_rows, cols < C
    b, t = rows // L, rows % L
    return rows, cols, mr, mc, b, t, _positions(pos, t, mr, HAS_POS)


@triton.jit
def _bias(bias, cols, mc, BC: tl.constexpr, HAS_BIAS: tl.constexpr, ACC: tl.constexpr):
    """The program's channels' biases (zeros without a bias)."""
    if HAS_BIAS:
        return tl.load(bias + cols, mask=mc, other=0).to(ACC)
    return tl.zeros([BC], dtype=ACC)


@triton.jit
def _taps_sum(x, w, bias_v, b, t, p, mr, cols, mc, sx_b, sx_l, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
              ACC: tl.constexpr):
    """``u = bias + sum_tap w[tap] x[t - (K - 1 - tap)]`` for a tile; a lag that reaches before the token's sequence
    contributes nothing."""
    u = tl.zeros([BT, BC], dtype=ACC) + bias_v[None, :]
    for tap in tl.static_range(K):
        lag = K - 1 - tap
        ok = mr & (p >= lag)
        xv = tl.load(x + (b * sx_b + (t - lag) * sx_l)[:, None] + cols[None, :], mask=ok[:, None] & mc[None, :],
                     other=0).to(ACC)
        u += xv * tl.load(w + cols * K + tap, mask=mc, other=0).to(ACC)[None, :]
    return u


@triton.jit
def conv_fwd_kernel(x, w, bias, pos, out, n_rows, L, sx_b, sx_l, C, K: tl.constexpr, BT: tl.constexpr,
                    BC: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_POS: tl.constexpr, ACC: tl.constexpr):
    """``out = silu(bias + sum_tap w[tap] x[t - (K - 1 - tap)])`` for a tile of tokens and channels; a lag that
    reaches before the token's sequence contributes nothing."""
    rows, cols, mr, mc, b, t, p = _tile(tl.program_id(0), pos, n_rows, L, C, BT, BC, HAS_POS, BT)
    acc = _taps_sum(x, w, _bias(bias, cols, mc, BC, HAS_BIAS, ACC), b, t, p, mr, cols, mc, sx_b, sx_l, K, BT, BC, ACC)
    o = acc / (1 + tl.exp(-acc))
    tl.store(out + rows[:, None] * C + cols[None, :], o.to(out.dtype.element_ty), mask=mr[:, None] & mc[None, :])


@triton.jit
def conv_bwd_kernel(x, w, bias, pos, g, dx, dw_part, db_part, n_rows, tiles_per_program, L, sx_b, sx_l, C,
                    K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, STRIDE: tl.constexpr, BC: tl.constexpr,
                    HAS_BIAS: tl.constexpr, HAS_POS: tl.constexpr, ACC: tl.constexpr):
    """``dx`` of ``tiles_per_program`` tiles (contiguous): the output ``lag`` tokens later reads ``x[t]`` through tap
    ``K - 1 - lag``, so ``dx[t] = sum_lag w[K - 1 - lag] du[t + lag]`` with ``du = g silu'(u)``; and the program's
    sums over its tokens of the filters' gradients ``du[t] x[t - lag]`` and the bias's ``du[t]`` (a row of
    ``dw_part`` ``[programs, C, K]`` and ``db_part`` ``[programs, C]``).

    A tile computes ``du`` once for ``BT`` tokens and writes ``dx`` for the first ``STRIDE`` of them (``BT - STRIDE
    >= K - 1``: the ``du`` after them that their ``dx`` reads); the next tile starts ``STRIDE`` tokens on. The
    shifted rows ``du[t + lag]`` come from the tile itself (``tl.gather`` along the tokens)."""
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    mc = cols < C
    taps = tl.arange(0, BK)
    local = tl.arange(0, BT)
    bias_v = _bias(bias, cols, mc, BC, HAS_BIAS, ACC)
    acc_w = tl.zeros([BK, BC], dtype=ACC)
    acc_b = tl.zeros([BC], dtype=ACC)
    for it in range(0, tiles_per_program):
        rows, cols, mr, mc, b, t, p = _tile(pid.to(tl.int64) * tiles_per_program + it, pos, n_rows, L, C, BT, BC,
                                            HAS_POS, STRIDE)
        u = _taps_sum(x, w, bias_v, b, t, p, mr, cols, mc, sx_b, sx_l, K, BT, BC, ACC)
        gv = tl.load(g + rows[:, None] * C + cols[None, :], mask=mr[:, None] & mc[None, :], other=0).to(ACC)
        sig = 1 / (1 + tl.exp(-u))
        du = gv * sig * (1 + u * (1 - sig))
        mo = mr & (local < STRIDE)  # the tokens whose dx this tile writes
        dxacc = tl.zeros([BT, BC], dtype=ACC)
        for lag in tl.static_range(K):
            t2 = t + lag
            ok2 = mo & (t2 < L)
            p2 = _positions(pos, t2, ok2, HAS_POS)
            ok2 = ok2 & (p2 >= lag)  # the output at t2 reads x[t] (else x[t] is before t2's sequence)
            later = tl.gather(du, tl.broadcast_to(tl.minimum(local + lag, BT - 1)[:, None], [BT, BC]), 0)
            dxacc += tl.where(ok2[:, None], later, 0) * tl.load(w + cols * K + (K - 1 - lag), mask=mc,
                                                                other=0).to(ACC)[None, :]
        tl.store(dx + rows[:, None] * C + cols[None, :], dxacc.to(dx.dtype.element_ty),
                 mask=mo[:, None] & mc[None, :])
        du = tl.where(mo[:, None], du, 0)
        for tap in tl.static_range(K):
            lag = K - 1 - tap
            ok = mo & (p >= lag)
            xv = tl.load(x + (b * sx_b + (t - lag) * sx_l)[:, None] + cols[None, :], mask=ok[:, None] & mc[None, :],
                         other=0).to(ACC)
            acc_w += tl.where(taps[:, None] == tap, tl.sum(du * xv, 0)[None, :], 0)
        acc_b += tl.sum(du, 0)
    row = pid.to(tl.int64) * C
    tl.store(dw_part + (row + cols[None, :]) * K + taps[:, None], acc_w, mask=(taps[:, None] < K) & mc[None, :])
    tl.store(db_part + row + cols, acc_b, mask=mc)


def supported(x, weight, bias, cu_seqlens) -> bool:
    """Whether the kernels take these operands as they are (else the PyTorch expressions run): ``x`` ``[B, L, C]``
    with contiguous channels, ``weight`` a contiguous ``[C, 1, K]`` of at most ``MAX_TAPS`` taps, ``bias`` None or a
    contiguous ``[C]``, ``cu_seqlens`` None or (``B`` = 1) integer starts, all on one device."""
    if x.dim() != 3 or weight.dim() != 3 or not x.is_floating_point():
        return False
    batch, _, channels = x.shape
    tensors = [x, weight] + [t for t in (bias, cu_seqlens) if t is not None]
    return (x.stride(2) == 1 and weight.shape[:2] == (channels, 1) and 0 < weight.shape[2] <= MAX_TAPS
            and weight.is_contiguous() and weight.is_floating_point()
            and (bias is None or (bias.shape == (channels,) and bias.is_contiguous() and bias.is_floating_point()))
            and (cu_seqlens is None or (batch == 1 and cu_seqlens.dim() == 1
                                        and cu_seqlens.dtype in (torch.int32, torch.int64)))
            and len({t.device for t in tensors}) == 1)


def _positions_of(cu_seqlens, length, device):
    """Each token's index in its packed sequence (int32 ``[L]``), or None for unpacked rows."""
    if cu_seqlens is None:
        return None
    position = torch.arange(length, device=device)
    index = torch.searchsorted(cu_seqlens, position, right=True) - 1
    return (position - cu_seqlens.long()[index]).to(torch.int32)


def _acc(x):
    return _acc_dtype(torch.float64 if x.dtype == torch.float64 else torch.float32)


@torch.library.custom_op("palimpsa::causal_conv_silu", mutates_args=())
def _conv_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    batch, length, channels = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    pos = _positions_of(cu_seqlens, length, x.device)
    bt, bc = FWD_TILE
    with on_device(x):
        conv_fwd_kernel[(triton.cdiv(batch * length, bt), triton.cdiv(channels, bc))](
            x, weight, x if bias is None else bias, x if pos is None else pos, out, batch * length, length,
            x.stride(0), x.stride(1), channels, K=weight.shape[2], BT=bt, BC=bc, HAS_BIAS=bias is not None,
            HAS_POS=pos is not None, ACC=_acc(x), num_warps=4, **FP_FUSION)
    return out


@_conv_op.register_fake
def _conv_fake(x, weight, bias, cu_seqlens):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("palimpsa::causal_conv_silu_backward", mutates_args=())
def _conv_backward_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      cu_seqlens: torch.Tensor | None, grad: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``dx`` (contiguous, ``x``'s dtype), ``dweight`` and ``dbias`` (empty without a bias) in their dtypes."""
    batch, length, channels = x.shape
    taps = weight.shape[2]
    pos = _positions_of(cu_seqlens, length, x.device)
    bt, bc, warps = BWD_TILE
    stride = bt - triton.next_power_of_2(max(1, taps - 1))  # each tile's last tokens feed its dx only
    if stride < 1:
        raise ValueError(f"BWD_TILE takes {bt} tokens a tile, which leaves none to write beside the {bt - stride} "
                         f"that {taps} taps read after them: give it at least {bt - stride + 1}")
    programs, per_program = split_rows(triton.cdiv(batch * length, stride), ROW_PROGRAMS)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw_part = torch.empty(programs, channels, taps, dtype=acc, device=x.device)
    db_part = torch.empty(programs, channels, dtype=acc, device=x.device)
    with on_device(x):
        conv_bwd_kernel[(programs, triton.cdiv(channels, bc))](
            x, weight, x if bias is None else bias, x if pos is None else pos, grad.contiguous(), dx, dw_part,
            db_part, batch * length, per_program, length, x.stride(0), x.stride(1), channels, K=taps,
            BK=triton.next_power_of_2(taps), BT=bt, STRIDE=stride, BC=bc, HAS_BIAS=bias is not None,
            HAS_POS=pos is not None, ACC=_acc(x), num_warps=warps, **FP_FUSION)
    dweight = dw_part.sum(0).view(weight.shape).to(weight.dtype)
    dbias = x.new_empty(0) if bias is None else db_part.sum(0).to(bias.dtype)
    return dx, dweight, dbias


@_conv_backward_op.register_fake
def _conv_backward_fake(x, weight, bias, cu_seqlens, grad):
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty_like(weight),
            x.new_empty(0) if bias is None else torch.empty_like(bias))


def _setup(ctx, inputs, output):
    x, weight, bias, cu_seqlens = inputs
    ctx.save_for_backward(x, weight, bias, cu_seqlens)


def _backward(ctx, grad):
    x, weight, bias, cu_seqlens = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.palimpsa.causal_conv_silu_backward(x, weight, bias, cu_seqlens, grad)
    return dx, dweight, None if bias is None else dbias, None


_conv_op.register_autograd(_backward, setup_context=_setup)


def fused_conv_silu(x, weight, bias, cu_seqlens):
    """``conv.causal_conv_silu`` through the kernels (the caller has checked :func:`supported`)."""
    return torch.ops.palimpsa.causal_conv_silu(x, weight, bias, cu_seqlens)
