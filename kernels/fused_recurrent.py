"""Triton kernels of the Palimpsa scan: a fused recurrent forward, a recomputing backward, a decoding step.

Every program owns one head's ``BV`` channels of the state: two register tiles ``M`` and ``I`` of
``[BV, N]`` (float32, float64 for float64 inputs) that it walks through time (palimpsa-math section 3):

    M_t = a_t M_{t-1} + v_t (x) k_t
    I_t = a_t I_{t-1} + (1 - a_t) I_prior + beta_t (x) (k_t * k_t)        a_t = exp(log_decay_t)
    y_t = (M_t / I_t) q_t,     u_t = (1 / I_t) (q_t * q_t)

Memory. The forward writes no per-token state. When a gradient is needed it stores one ``(M, I)`` pair at
the start of every chunk of ``CT`` tokens (the checkpoints). The backward walks the chunks in reverse; in a
chunk it first re-runs the forward from the checkpoint and leaves the state at every ``BS``-th token in a
small per-program scratch slab (``CT / BS`` pairs, reused by every chunk), then walks the blocks of ``BS``
tokens in reverse and, inside a block, the pairs of tokens in reverse: each pair is recomputed from the block
start in registers, which gives ``(M_{t-1}, I_{t-1})`` and ``(M_t, I_t)`` for both tokens of the pair, and
the reverse recurrences of palimpsa-math section 6 run on it. Earlier states are only ever recomputed
forward, never rebuilt by dividing by the decay.

Gradients shared between programs (``dk``, ``dq`` over the channels and the heads of a group, ``dlog_decay``
over the channel blocks) are added atomically in float32 (float64 for float64 inputs).

The forward is one dispatcher operator (``torch.ops.palimpsa.triton_scan_forward``, with its backward
registered), so that selective activation checkpointing can keep its outputs (``y`` and the checkpoints)
from the forward instead of running the scan a second time in the backward's recompute. A copy of this module
loaded under another name (the modeling code written beside a model's weights, which transformers imports as
``transformers_modules.<model>...``) registers its operators in a namespace of its own (``OPS_NAMESPACE``).
"""

import contextlib
import functools
import importlib.util
import json
import os
import re

import torch
import triton
import triton.language as tl

# "palimpsa" for the package; a copy registers under its module's name, so that no two copies loaded side by side
# (the package and a model's code, or the code of two models) register the same operator twice
OPS_NAMESPACE = "palimpsa" if __name__ == "palimpsa.kernels.fused_recurrent" else re.sub(r"\W", "_", __name__)

# Tests set this to allocate every output NaN-filled, so that an element a kernel fails to write shows up.
POISON_OUTPUTS = False

# Default tiling, chosen by scripts/bench_scan.py on an H200 (see docs/bench/scan-notes.md, section 5).
FWD_CONFIG = {"BV": 16, "TRANS": True, "UNROLL": 2, "num_warps": 4}
# The forward's tiling where the grid fills the GPU without four warps a program (_forward_config): one warp of eight
# channels, one token an iteration, so the readout's sum stays inside the warp (no barrier). On an H100 at 2.7b
# shapes, bf16, B = 4, L = 8192: 10.82 ms against FWD_CONFIG's 12.37. With TRANS and no load of a state before the
# walk, Triton keeps each channel's N elements in 4 lanes (11.4 SASS instructions per element and token, no
# shuffles); TRANS False, or a state's load, puts 32 lanes along N (13.1, a 5-step shuffle sum a channel and token):
# 12.92 ms, 12.80 with states in (docs/bench/chunked-tuning-h100-2026-11-26; the chunk walk prefers that layout:
# chunked_fwd.WALK_CONFIG)
ONE_WARP_FWD_CONFIG = {"BV": 8, "TRANS": True, "UNROLL": 1, "num_warps": 1}
ONE_WARP_PROGRAMS_PER_SM = 8  # ONE_WARP_FWD_CONFIG from this many of its programs per SM (16 fit the registers)
# KQ32: the backward reads float32 copies of 16-bit keys and queries (_float32_keys): at B = 4, L = 8192 forward +
# backward 59.01 ms against 60.29 (H200, docs/bench/ring-2026-11-27); the forwards above were not measured with it
BWD_CONFIG = {"BV": 4, "TRANS": False, "num_warps": 1, "KQ32": True}
SMALL_GRID_BV = 2  # the backward's BV where BWD_CONFIG's grid would fill under two waves (see _backward_config)
STEP_CONFIG = {"BV": 16, "TRANS": False, "num_warps": 4}
CHUNK_SIZE = 512  # tokens per checkpoint (CT)
BLOCK_SIZE = 8  # tokens per scratch state in the backward (BS)
# every launch and offline compile asks for FMA contraction explicitly: the kernels' arithmetic is written for it (a
# multiply and an add become one FFMA), Triton 3.9 warns on every first compile where it is left to the default, and
# Triton 3.10 is to turn that default off
FP_FUSION = {"enable_fp_fusion": True}
# RESCALE (_rescales): the forward's walk renormalises its rescaled states before their scale passes e^RESCALE_TAU,
# and the backward's pass A runs rescaled over a block whose log decays' magnitudes sum to at most it: scales up to
# e^20 (~5e8) keep every product of float32 inputs far from overflow, and the rounding stays at float32's (a scale
# multiplies every term of a state alike)
RESCALE_TAU = tl.constexpr(20.0)
# The backward where no bwd_config is given: "sequential" (this module's kernel), "chunked" (chunked_bwd.py's
# chunk-parallel one) or "auto" (the default: chunked on CUDA where its corrections run in TF32, see
# chunked_by_default; chunked_bwd itself walks whole sequences in its Gluon pass, or runs the sequential kernel, where
# the grid needs no split; for float32 at full precision chunked without a split, whole_by_default)
BACKWARD_ENV = "PALIMPSA_TRITON_BACKWARD"
BACKWARDS = ("auto", "sequential", "chunked")
# The forward where no fwd_config is given: "sequential" (palimpsa_fwd_kernel over whole sequences), "chunked"
# (chunked_fwd.py's chunk-parallel one) or "auto" (the default: chunked on CUDA for 16-bit and float32 inputs,
# chunked_forward_by_default, where the sequential grid would leave the GPU short of programs, chunked_fwd.worth_it)
FORWARD_ENV = "PALIMPSA_TRITON_FORWARD"
FORWARDS = BACKWARDS


def _ops():
    """This module's operators, ``torch.ops.<OPS_NAMESPACE>``."""
    return getattr(torch.ops, OPS_NAMESPACE)


def slab_states(chunk_size: int, block_size: int, from_checkpoint: bool) -> int:
    """The state pairs in a backward program's scratch slab: the start of every block of ``block_size`` tokens of
    a chunk, but the first where that is read from the chunk's checkpoint (``_reverse_chunk``'s
    ``SLAB_FROM_CHECKPOINT``: the chunk-parallel local pass; the sequential kernel keeps it in the slab until a GPU
    run says which is faster, since reading it from the checkpoints moves its registers both ways: 213 to 236 at
    BV 4, 227 to 210 at BV 2, bf16, no states, Triton 3.9 for sm_90a); at least 1."""
    return max(1, chunk_size // block_size - int(from_checkpoint))


def _output(shape, dtype, device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@triton.jit
def _reciprocal(x, FAST_RCP: tl.constexpr):
    """``1 / x``; with FAST_RCP one ``rcp.approx.ftz.f32`` (1 ulp) instead of ``div.full.f32``'s 8 instructions."""
    if FAST_RCP:
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return 1 / x


@triton.jit
def _exp(x, FAST_EXP: tl.constexpr):
    """``exp(x)``; with FAST_EXP one ``ex2.approx.ftz.f32`` of ``x log2(e)`` (results below 2^-126 flushed to 0)
    instead of ``tl.exp``'s five instructions, whose extra three keep such results as subnormals."""
    if FAST_EXP:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def _rows(x, TRANS: tl.constexpr):
    """A ``[BV]`` channel vector, shaped to broadcast against a state tile."""
    if TRANS:
        return x[None, :]
    else:
        return x[:, None]


@triton.jit
def _cols(x, TRANS: tl.constexpr):
    """A ``[BK]`` key/query vector, shaped to broadcast against a state tile."""
    if TRANS:
        return x[:, None]
    else:
        return x[None, :]


@triton.jit
def _sum_n(x, TRANS: tl.constexpr):
    """Sum a state tile over the state dimension ``N``: ``[BV]``."""
    if TRANS:
        return tl.sum(x, 0)
    else:
        return tl.sum(x, 1)


@triton.jit
def _sum_v(x, TRANS: tl.constexpr):
    """Sum a state tile over the channels: ``[BK]``."""
    if TRANS:
        return tl.sum(x, 1)
    else:
        return tl.sum(x, 0)


@triton.jit
def _load_token_log(v, k, g, beta, tok, valid, i_h, i_g, o_v, o_k,
                    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                    USE_BETA: tl.constexpr, ACC: tl.constexpr):
    """:func:`_load_token` with the log decay instead of the decay."""
    b_k = tl.load(k + (tok * G + i_g) * N + o_k, mask=o_k < tl.where(valid, N, 0), other=0).to(ACC)
    b_v = tl.load(v + (tok * H + i_h) * P + o_v, mask=o_v < tl.where(valid, P, 0), other=0).to(ACC)
    b_l = tl.load(g + tok * H + i_h, mask=valid, other=0).to(ACC)
    if USE_BETA:
        b_b = tl.load(beta + (tok * H + i_h) * P + o_v, mask=o_v < tl.where(valid, P, 0), other=0).to(ACC)
    else:
        b_b = b_v
    return b_k, b_v, b_l, b_b


@triton.jit
def _load_token(v, k, g, beta, tok, valid, i_h, i_g, o_v, o_k,
                H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                USE_BETA: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr = False):
    """Key, value, decay and gain of token ``tok``; an invalid token reads as the identity update. (Written out
    rather than through :func:`_load_token_log`: that order of the loads and the exponential took the local pass
    from 238 to 254 registers under Triton 3.6.)"""
    b_k = tl.load(k + (tok * G + i_g) * N + o_k, mask=o_k < tl.where(valid, N, 0), other=0).to(ACC)
    b_v = tl.load(v + (tok * H + i_h) * P + o_v, mask=o_v < tl.where(valid, P, 0), other=0).to(ACC)
    b_a = _exp(tl.load(g + tok * H + i_h, mask=valid, other=0).to(ACC), FAST_EXP)
    if USE_BETA:
        b_b = tl.load(beta + (tok * H + i_h) * P + o_v, mask=o_v < tl.where(valid, P, 0), other=0).to(ACC)
    else:
        b_b = b_v
    return b_k, b_v, b_a, b_b


@triton.jit
def _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA: tl.constexpr, TRANS: tl.constexpr):
    """One step of both recurrences on the state tiles."""
    b_m = b_m * b_a + _rows(b_v, TRANS) * _cols(b_k, TRANS)
    b_c = (1 - b_a) * b_ip
    if USE_BETA:
        b_i = b_i * b_a + (_rows(b_b, TRANS) * _cols(b_k * b_k, TRANS) + b_c)
    else:
        b_i = b_i * b_a + b_c
    return b_m, b_i


@triton.jit
def _step(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k,
          H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, USE_BETA: tl.constexpr,
          TRANS: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr = False):
    """Token ``tok``'s inputs and the state after it: ``(M, I, k, v, a, beta)``."""
    b_k, b_v, b_a, b_b = _load_token(v, k, g, beta, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC,
                                     FAST_EXP)
    b_m, b_i = _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA, TRANS)
    return b_m, b_i, b_k, b_v, b_a, b_b


@triton.jit
def _bounds(cu_seqlens, chunk_offsets, i_n, T, CT: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Sequence ``i_n``'s first token, length and first checkpoint (``cu_seqlens`` and ``chunk_offsets`` with
    packing, else every sequence ``T`` long)."""
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        T = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos).to(tl.int32)
        boc = tl.load(chunk_offsets + i_n).to(tl.int64)
    else:
        bos = i_n.to(tl.int64) * T
        boc = i_n.to(tl.int64) * tl.cdiv(T, CT)
    return bos, T, boc


@triton.jit
def _program(cu_seqlens, chunk_offsets, T, H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
             BV: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, IS_VARLEN: tl.constexpr, TRANS: tl.constexpr):
    """What a scan program owns: channel block ``i_v`` of (sequence, head) ``i_nh``, the sequence's first token
    ``bos``, length and first checkpoint ``boc``, its channel and state offsets and its tile's mask.

    Per-element offsets (``o_s``, inside the program's ``[BV, N]`` block) are int32; every int64 part of an
    address goes in a scalar base (``o_state``), which keeps 64-bit address tiles out of the registers.
    """
    return _program_at(tl.program_id(0), tl.program_id(1), cu_seqlens, chunk_offsets, T, H, G, P, N, BV, BK, CT,
                       IS_VARLEN, TRANS)


@triton.jit
def _program_at(i_v, i_nh, cu_seqlens, chunk_offsets, T, H: tl.constexpr, G: tl.constexpr, P: tl.constexpr,
                N: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, IS_VARLEN: tl.constexpr,
                TRANS: tl.constexpr):
    """:func:`_program` for channel block ``i_v`` of (sequence, head) ``i_nh`` given explicitly (a persistent
    program takes several in turn)."""
    i_n, i_h = i_nh // H, i_nh % H
    bos, T, boc = _bounds(cu_seqlens, chunk_offsets, i_n, T, CT, IS_VARLEN)
    o_v = i_v * BV + tl.arange(0, BV)
    o_k = tl.arange(0, BK)
    m_s = _rows(o_v < P, TRANS) & _cols(o_k < N, TRANS)
    o_s = _rows(tl.arange(0, BV) * N, TRANS) + _cols(o_k, TRANS)
    o_state = (i_nh.to(tl.int64) * P + i_v * BV) * N
    return i_v, i_nh, i_h, i_h // (H // G), bos, T, boc, o_v, o_k, m_s, o_s, o_state


@triton.jit
def _load_fwd_token(v, k, q, g, beta, tok, valid, i_h, i_g, o_v, o_k,
                    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
                    USE_BETA: tl.constexpr, ACC: tl.constexpr, LOG: tl.constexpr = False):
    """:func:`_load_token` and the query; with ``LOG`` the log decay instead of the decay."""
    b_k, b_v, b_a, b_b = _load_token_log(v, k, g, beta, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC)
    if not LOG:
        b_a = tl.exp(b_a)
    b_q = tl.load(q + (tok * G + i_g) * N + o_k, mask=o_k < tl.where(valid, N, 0), other=0).to(ACC)
    return b_k, b_v, b_a, b_b, b_q


@triton.jit
def _store_readout(b_mr, b_r, b_q, b_ue, y, u, tok, valid, i_h, o_v, v0, H: tl.constexpr, P: tl.constexpr,
                   USE_UNCERTAINTY: tl.constexpr, TRANS: tl.constexpr, SCATTER: tl.constexpr,
                   SCALED: tl.constexpr):
    """Token ``tok``'s readout from ``mu = M / I`` (``b_mr``) and ``1 / I`` (``b_r``): ``y = mu q``, ``u = (1 / I)
    q^2``, the latter times ``b_ue`` with ``SCALED`` (rescaled states, :func:`_rescaled_fwd_token`). ``SCATTER``
    (:func:`_scatters`): ``y``'s sums over the states as FFMA chains over each lane's own, then one butterfly over
    the lanes that reduce-scatters the 8 channels (:func:`_scatter_rows`), stored from there."""
    m_y = o_v < tl.where(valid, P, 0)
    if SCATTER:
        s_y = _scatter_rows(_lane_dot(b_mr, tl.broadcast_to(_cols(b_q, TRANS), b_mr.shape)))
        lane = tl.arange(0, 32)[None, :]
        o_c = v0 + ((lane >> 2) & 7)
        tl.store(y + (tok * H + i_h) * P + o_c, s_y.to(y.dtype.element_ty),
                 mask=valid & ((lane & 3) == 0) & (o_c < P))
    else:
        b_y = _sum_n(b_mr * _cols(b_q, TRANS), TRANS)
        tl.store(y + (tok * H + i_h) * P + o_v, b_y.to(y.dtype.element_ty), mask=m_y)
    if USE_UNCERTAINTY:
        b_u = _sum_n(b_r * _cols(b_q * b_q, TRANS), TRANS)
        if SCALED:
            b_u = b_u * b_ue
        tl.store(u + (tok * H + i_h) * P + o_v, b_u.to(u.dtype.element_ty), mask=m_y)


@triton.jit
def _fwd_token(b_m, b_i, b_k, b_v, b_a, b_b, b_q, b_ip, y, u, tok, valid, i_h, o_v, v0,
               H: tl.constexpr, P: tl.constexpr, USE_BETA: tl.constexpr, USE_UNCERTAINTY: tl.constexpr,
               TRANS: tl.constexpr, FAST_RCP: tl.constexpr, SCATTER: tl.constexpr = False):
    """Advance the state by one token and write its readout (an invalid token: identity, nothing written)."""
    b_m, b_i = _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA, TRANS)
    b_r = _reciprocal(b_i, FAST_RCP)
    _store_readout(b_m * b_r, b_r, b_q, b_r, y, u, tok, valid, i_h, o_v, v0, H, P, USE_UNCERTAINTY, TRANS, SCATTER,
                   False)
    return b_m, b_i


@triton.jit
def _rescaled_fwd_token(b_m, b_j, b_s, b_k, b_v, b_l, b_b, b_q, b_ip, y, u, tok, valid, i_h, o_v, v0,
                        H: tl.constexpr, P: tl.constexpr, USE_BETA: tl.constexpr, USE_UNCERTAINTY: tl.constexpr,
                        TRANS: tl.constexpr, FAST_RCP: tl.constexpr, SCATTER: tl.constexpr, ACC: tl.constexpr,
                        FAST_EXP: tl.constexpr):
    """:func:`_fwd_token` in rescaled states (``RESCALE``): ``M' = e M`` and ``J' = e (I - I_prior)`` with ``e =
    exp(b_s)`` and ``b_s`` the log decays since the last renormalisation, negated. An update is one FFMA per state
    (``M' += v (k e)``, ``J' += beta (k^2 e)``), the readout divides by ``D = J' + e I_prior = e I`` (``M' / D = M
    / I``, ``u`` times ``e``). Where ``|b_s|`` would pass ``RESCALE_TAU`` (a uniform branch) the states are
    renormalised first: multiplied by the decay since then, ``exp(-b_s)`` with this token's, and ``b_s`` restarts
    at 0. Returns ``(M', J', b_s)``."""
    b_g = b_s - b_l
    if tl.abs(b_g) > RESCALE_TAU:
        b_c = _exp(-b_g, FAST_EXP)
        b_m = b_m * b_c
        b_j = b_j * b_c
        b_s = tl.zeros([], dtype=ACC)
    else:
        b_s = b_g
    b_e = _exp(b_s, FAST_EXP)
    b_ke = b_k * b_e
    b_m += _rows(b_v, TRANS) * _cols(b_ke, TRANS)
    if USE_BETA:
        b_j += _rows(b_b, TRANS) * _cols(b_k * b_ke, TRANS)
    b_r = _reciprocal(b_j + b_e * b_ip, FAST_RCP)
    _store_readout(b_m * b_r, b_r, b_q, b_e, y, u, tok, valid, i_h, o_v, v0, H, P, USE_UNCERTAINTY, TRANS, SCATTER,
                   True)
    return b_m, b_j, b_s


@triton.jit
def palimpsa_fwd_kernel(
    v, k, q, g, beta, m0, i0, ip, y, u, ck_m, ck_i, mT, iT, cu_seqlens, chunk_offsets, T,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
    BV: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, UNROLL: tl.constexpr,
    USE_BETA: tl.constexpr, USE_INITIAL_STATE: tl.constexpr, USE_INITIAL_IMPORTANCE: tl.constexpr,
    STORE_FINAL_STATE: tl.constexpr, STORE_CHECKPOINTS: tl.constexpr, USE_UNCERTAINTY: tl.constexpr,
    IS_VARLEN: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr, ACC: tl.constexpr,
    CHUNKED: tl.constexpr = False, SCATTER: tl.constexpr = False, RESCALE: tl.constexpr = False,
    FAST_EXP: tl.constexpr = False,
):
    """A program walks its channel block of one (sequence, head) through the whole sequence, storing the
    checkpoints on the way; with ``CHUNKED`` (``chunked_fwd.py``) it walks one chunk only (``program_id(2)``),
    from that chunk's checkpoint, which the chunked forward has already written, and stores none. ``RESCALE``:
    every chunk walked in rescaled states (:func:`_rescaled_fwd_token`), the true ones at its start and end."""
    i_v, i_nh, i_h, i_g, bos, T, boc, o_v, o_k, m_s, o_s, o_state = _program(
        cu_seqlens, chunk_offsets, T, H, G, P, N, BV, BK, CT, IS_VARLEN, TRANS)
    b_ip = tl.load(ip).to(ACC)
    if CHUNKED:
        # a program past its sequence's chunks (packed sequences of unequal lengths) walks nothing
        c_first = tl.program_id(2)
        c_end = tl.minimum(c_first + 1, tl.cdiv(T, CT))
        m_c = m_s & (tl.zeros(o_s.shape, dtype=tl.int32) + c_first < c_end)  # (a scalar mask would not do)
        o_ck = (((boc + c_first) * H + i_h) * P + i_v * BV) * N
        b_m = tl.load(ck_m + o_ck + o_s, mask=m_c, other=0).to(ACC)
        b_i = tl.load(ck_i + o_ck + o_s, mask=m_c, other=1).to(ACC)
        b_i = tl.where(m_s, b_i, b_ip)
    else:
        c_first = 0
        c_end = tl.cdiv(T, CT)
        m_c = m_s
        if USE_INITIAL_STATE:
            b_m = tl.load(m0 + o_state + o_s, mask=m_s, other=0).to(ACC)
        else:
            b_m = tl.zeros(o_s.shape, dtype=ACC)
        if USE_INITIAL_IMPORTANCE:
            b_i = tl.load(i0 + o_state + o_s, mask=m_s, other=1).to(ACC)
            b_i = tl.where(m_s, b_i, b_ip)
        else:
            b_i = tl.zeros(o_s.shape, dtype=ACC) + b_ip

    # software pipeline: the inputs of the next UNROLL tokens are loaded while the current ones are computed
    t_first = c_first * CT + tl.zeros([], dtype=tl.int32)  # a tensor even where T is specialised to 1
    # (with RESCALE the decays travel as log decays)
    b_k1, b_v1, b_a1, b_b1, b_q1 = _load_fwd_token(v, k, q, g, beta, bos + t_first, t_first < T, i_h, i_g, o_v,
                                                   o_k, H, G, P, N, USE_BETA, ACC, RESCALE)
    if UNROLL == 2:
        b_k2, b_v2, b_a2, b_b2, b_q2 = _load_fwd_token(v, k, q, g, beta, bos + t_first + 1, t_first + 1 < T, i_h,
                                                       i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC, RESCALE)
    for i_c in range(c_first, c_end):
        if STORE_CHECKPOINTS:
            o_ck = (((boc + i_c) * H + i_h) * P + i_v * BV) * N
            tl.store(ck_m + o_ck + o_s, b_m, mask=m_s)
            tl.store(ck_i + o_ck + o_s, b_i, mask=m_s)
        if RESCALE:  # (M', J') with the scale of the chunk start: (M, I - I_prior)
            b_i = b_i - b_ip
            b_s = tl.zeros([], dtype=ACC)
        for t in range(i_c * CT, tl.minimum(i_c * CT + CT, T), UNROLL):
            tok = bos + t
            n_k1, n_v1, n_a1, n_b1, n_q1 = _load_fwd_token(v, k, q, g, beta, tok + UNROLL, t + UNROLL < T, i_h,
                                                           i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC, RESCALE)
            if UNROLL == 2:
                n_k2, n_v2, n_a2, n_b2, n_q2 = _load_fwd_token(v, k, q, g, beta, tok + 3, t + 3 < T, i_h, i_g,
                                                               o_v, o_k, H, G, P, N, USE_BETA, ACC, RESCALE)
            if RESCALE:
                b_m, b_i, b_s = _rescaled_fwd_token(b_m, b_i, b_s, b_k1, b_v1, b_a1, b_b1, b_q1, b_ip, y, u, tok,
                                                    t < T, i_h, o_v, i_v * BV, H, P, USE_BETA, USE_UNCERTAINTY,
                                                    TRANS, FAST_RCP, SCATTER, ACC, FAST_EXP)
            else:
                b_m, b_i = _fwd_token(b_m, b_i, b_k1, b_v1, b_a1, b_b1, b_q1, b_ip, y, u, tok, t < T, i_h, o_v,
                                      i_v * BV, H, P, USE_BETA, USE_UNCERTAINTY, TRANS, FAST_RCP, SCATTER)
            b_k1, b_v1, b_a1, b_b1, b_q1 = n_k1, n_v1, n_a1, n_b1, n_q1
            if UNROLL == 2:
                # a chunk holds an even number of tokens; only the sequence's last pair can be half empty
                if RESCALE:
                    b_m, b_i, b_s = _rescaled_fwd_token(b_m, b_i, b_s, b_k2, b_v2, b_a2, b_b2, b_q2, b_ip, y, u,
                                                        tok + 1, t + 1 < T, i_h, o_v, i_v * BV, H, P, USE_BETA,
                                                        USE_UNCERTAINTY, TRANS, FAST_RCP, SCATTER, ACC, FAST_EXP)
                else:
                    b_m, b_i = _fwd_token(b_m, b_i, b_k2, b_v2, b_a2, b_b2, b_q2, b_ip, y, u, tok + 1, t + 1 < T,
                                          i_h, o_v, i_v * BV, H, P, USE_BETA, USE_UNCERTAINTY, TRANS, FAST_RCP,
                                          SCATTER)
                b_k2, b_v2, b_a2, b_b2, b_q2 = n_k2, n_v2, n_a2, n_b2, n_q2
        if RESCALE:  # back to the true states
            b_w = _exp(-b_s, FAST_EXP)
            b_m = b_m * b_w
            b_i = b_i * b_w + b_ip

    if STORE_FINAL_STATE:
        if CHUNKED:  # the program of the sequence's last chunk
            m_f = m_c & (tl.zeros(o_s.shape, dtype=tl.int32) + c_end == tl.cdiv(T, CT))
        else:
            m_f = m_s
        tl.store(mT + o_state + o_s, b_m.to(mT.dtype.element_ty), mask=m_f)
        tl.store(iT + o_state + o_s, b_i.to(iT.dtype.element_ty), mask=m_f)


@triton.jit
def _readout_adjoints(b_m, b_i, b_dm, b_di, b_an, b_q, b_dy, b_du, USE_DU: tl.constexpr, TRANS: tl.constexpr,
                      FAST_RCP: tl.constexpr, CHAIN: tl.constexpr):
    """The start of a reverse step: ``dM_t``, ``dI_t`` from the adjoints of the step after (``b_dm``, ``b_di``, decay
    ``b_an``) and token ``t``'s readout, with ``mu_t = M_t / I_t`` and ``dq_t``. ``CHAIN``: ``dq``'s sum over the
    channels as one FFMA chain (:func:`_row_dot`)."""
    b_r = _reciprocal(b_i, FAST_RCP)
    b_mu = b_m * b_r
    b_gr = _rows(b_dy, TRANS) * _cols(b_q, TRANS) * b_r  # dmu / I
    b_dm = b_dm * b_an + b_gr
    b_e = b_gr * b_mu  # dmu * M / I^2
    if CHAIN:
        b_dq = _row_dot(b_mu, tl.broadcast_to(_rows(b_dy, TRANS), b_mu.shape))
    else:
        b_dq = _sum_v(b_mu * _rows(b_dy, TRANS), TRANS)
    if USE_DU:
        b_rdu = b_r * _rows(b_du, TRANS)
        b_e += b_rdu * b_r * _cols(b_q * b_q, TRANS)
        b_dq += 2 * b_q * _sum_v(b_rdu, TRANS)
    b_di = b_di * b_an - b_e
    return b_dm, b_di, b_dq


@triton.jit
def _reverse_step(
    b_m, b_i, b_mp, b_ip_prev, b_dm, b_di, b_an, b_k, b_v, b_a, b_b, b_q, b_dy, b_du, tok, valid, i_h, i_g,
    o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, USE_BETA: tl.constexpr,
    USE_DU: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr, ACC: tl.constexpr, GAUGE: tl.constexpr = False,
    PROBE: tl.constexpr = 0, PAIRSUM: tl.constexpr = False,
):
    """Gradients of token ``tok`` from ``(M_t, I_t)``, ``(M_{t-1}, I_{t-1})`` and the adjoints of the step after.

    ``GAUGE``: the decay gradient from token ``t``'s own state (``b_mp``, ``b_ip_prev`` unused), by the identities
    ``a_t <dM_t, M_{t-1}> = <dM_t, M_t> - v . dv`` and ``a_t <dI_t, I_{t-1} - I_prior> = <dI_t, I_t - I_prior> -
    beta . dbeta`` (both recursions' updates solved for the previous state), so that the previous state need not
    stay live.

    ``b_q``, ``b_dy``, ``b_du`` are the token's query and output gradients, loaded by the caller ahead of time.

    ``b_dm``, ``b_di`` hold ``dM_{t+1}``, ``dI_{t+1}`` and ``b_an`` the decay ``a_{t+1}``; returns
    ``dM_t``, ``dI_t`` and ``a_t`` (palimpsa-math section 6). ``PAIRSUM`` (not with ``GAUGE`` or ``TRANS``): ``dv``
    and ``dbeta`` are not summed over the lanes nor stored here; their lane partials (:func:`_lane_sums`) are
    returned too, for :func:`_pair_rows` to finish with the pair's other token.
    """
    m_v = o_v < tl.where(valid, P, 0)
    m_k = o_k < tl.where(valid, N, 0)
    b_dm, b_di, b_dq = _readout_adjoints(b_m, b_i, b_dm, b_di, b_an, b_q, b_dy, b_du, USE_DU, TRANS, FAST_RCP,
                                         False)
    if PAIRSUM:
        l_dv = _lane_sums(b_dm * _cols(b_k, TRANS))
        l_db = l_dv
    else:
        b_dv = _sum_n(b_dm * _cols(b_k, TRANS), TRANS)
    if GAUGE:  # a_t times the inner products with the previous state, as a whole
        b_da = tl.sum(_sum_v(b_dm * b_m + b_di * (b_i - b_ip), TRANS), 0) - tl.sum(b_v * b_dv, 0)
    else:
        b_da = b_a * tl.sum(_sum_v(b_dm * b_mp + b_di * (b_ip_prev - b_ip), TRANS), 0)
    b_dk = _sum_v(b_dm * _rows(b_v, TRANS), TRANS)
    # PROBE (timing only, wrong gradients; bits): 1 leaves out the dk, dq sums and atomics, 4 the dv, dbeta row sums
    # and stores, 16 the decay gradient's sum and atomic, so that a run measures what each costs
    if USE_BETA:
        if PAIRSUM:
            l_db = _lane_sums(b_di * _cols(b_k * b_k, TRANS))
        else:
            b_db = _sum_n(b_di * _cols(b_k * b_k, TRANS), TRANS)
            if (PROBE & 4) == 0:
                tl.store(dbeta + (tok * H + i_h) * P + o_v, b_db.to(dbeta.dtype.element_ty), mask=m_v)
        b_dk += 2 * b_k * _sum_v(b_di * _rows(b_b, TRANS), TRANS)
        if GAUGE:
            b_da -= tl.sum(b_b * b_db, 0)
    if not PAIRSUM:
        if (PROBE & 4) == 0:
            tl.store(dv + (tok * H + i_h) * P + o_v, b_dv.to(dv.dtype.element_ty), mask=m_v)
    # relaxed: the default acq_rel ordering fences every atomic, and nothing here reads these sums back
    if (PROBE & 16) == 0:
        tl.atomic_add(dg + tok * H + i_h, b_da.to(dg.dtype.element_ty), mask=valid, sem="relaxed")
    if (PROBE & 1) == 0:
        tl.atomic_add(dq + (tok * G + i_g) * N + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k, sem="relaxed")
        tl.atomic_add(dk + (tok * G + i_g) * N + o_k, b_dk.to(dk.dtype.element_ty), mask=m_k, sem="relaxed")
    if PAIRSUM:
        return b_dm, b_di, b_a, l_dv, l_db
    else:
        return b_dm, b_di, b_a


@triton.jit
def _chained_step(
    b_m, b_i, b_mp, b_ip_prev, b_dm, b_di, b_an, b_k, b_v, b_a, b_b, b_q, b_dy, b_du, tok, valid, i_g,
    o_k, dk, dq, b_ip,
    G: tl.constexpr, N: tl.constexpr, USE_BETA: tl.constexpr, USE_DU: tl.constexpr, FAST_RCP: tl.constexpr,
    PROBE: tl.constexpr = 0,
):
    """:func:`_reverse_step` with ``CHAIN`` (pairs of one-warp programs of 4 channels, no ``GAUGE`` or ``TRANS``):
    every sum over the channels or over 4 consecutive states is one FFMA chain (:func:`_row_dot`,
    :func:`_lane_dot`) instead of products added in a tree. ``dk``, ``dq`` are added here; ``dv``, ``dbeta`` and
    the decay gradient are returned as partial sums over each 4 consecutive states (``[4, N / 4]``, ``[4, N / 4]``,
    ``[N / 4]``: at 128 states a lane's own), for :func:`_pair_rows` and :func:`_pair_decay_grads` to finish with
    the pair's other token (or :func:`_token_rows` alone). Returns ``dM_t``, ``dI_t``, ``a_t`` and those three."""
    m_k = o_k < tl.where(valid, N, 0)
    b_dm, b_di, b_dq = _readout_adjoints(b_m, b_i, b_dm, b_di, b_an, b_q, b_dy, b_du, USE_DU, False, FAST_RCP,
                                         True)
    b_kt = tl.broadcast_to(_cols(b_k, False), b_dm.shape)
    l_dv = _lane_dot(b_dm, b_kt)
    l_db = l_dv
    b_dk = _row_dot(b_dm, tl.broadcast_to(_rows(b_v, False), b_dm.shape))
    b_g = _row_dot2(b_dm, b_mp, b_di, b_ip_prev - b_ip)
    g0, g1, g2, g3 = _split4(tl.reshape(b_g, [b_g.shape[0] // 4, 4]))
    l_dg = b_a * (g0 + g1 + g2 + g3)
    if USE_BETA:
        l_db = _lane_dot(b_di, b_kt * b_kt)
        b_dk += 2 * b_k * _row_dot(b_di, tl.broadcast_to(_rows(b_b, False), b_di.shape))
    if (PROBE & 1) == 0:
        tl.atomic_add(dq + (tok * G + i_g) * N + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k, sem="relaxed")
        tl.atomic_add(dk + (tok * G + i_g) * N + o_k, b_dk.to(dk.dtype.element_ty), mask=m_k, sem="relaxed")
    return b_dm, b_di, b_a, l_dv, l_db, l_dg


@triton.jit
def _token_rows(dv, dbeta, dg, l_dv, l_db, l_dg, tok, valid, i_h, o_v, H: tl.constexpr, P: tl.constexpr,
                USE_BETA: tl.constexpr, PROBE: tl.constexpr = 0):
    """One token's ``dv``, ``dbeta`` stored and decay gradient added from :func:`_chained_step`'s partial sums, with
    plain reductions (``CHAIN`` without ``PAIRSUM``: the interpreter's path, no inline PTX)."""
    m_v = o_v < tl.where(valid, P, 0)
    if (PROBE & 4) == 0:
        tl.store(dv + (tok * H + i_h) * P + o_v, tl.sum(l_dv, 1).to(dv.dtype.element_ty), mask=m_v)
        if USE_BETA:
            tl.store(dbeta + (tok * H + i_h) * P + o_v, tl.sum(l_db, 1).to(dbeta.dtype.element_ty), mask=m_v)
    if (PROBE & 16) == 0:
        tl.atomic_add(dg + tok * H + i_h, tl.sum(l_dg, 0).to(dg.dtype.element_ty), mask=valid, sem="relaxed")


# PAIRSUM's butterflies (inline PTX on each lane's values): a stage over lane bit ``m`` takes two tensors and leaves
# in the lanes whose bit is 0 the first one's sum over the two lanes, in the others the second one's
def _butterfly_asm(bit: int) -> str:
    return ("{ .reg .pred p; .reg .b32 l, s, k, r; mov.u32 l, %laneid; and.b32 l, l, " + str(bit) + "; "
            "setp.ne.u32 p, l, 0; selp.b32 s, $1, $2, p; selp.b32 k, $2, $1, p; "
            "shfl.sync.bfly.b32 r, s, " + str(bit) + ", 0x1f, 0xffffffff; add.f32 $0, k, r; }")


def _xor_asm(bit: int) -> str:
    return "shfl.sync.bfly.b32 $0, $1, " + str(bit) + ", 0x1f, 0xffffffff;"


STAGE16, STAGE8, STAGE4 = (tl.constexpr(_butterfly_asm(bit)) for bit in (16, 8, 4))
XOR8, XOR4, XOR2, XOR1 = (tl.constexpr(_xor_asm(bit)) for bit in (8, 4, 2, 1))


@triton.jit
def _butterfly(a, b, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(ASM, "=r,r,r", [a, b], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _plus_lane(x, ASM: tl.constexpr):
    """``x`` plus the same element of the lane whose index differs in one bit."""
    return x + tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _lane_sums(x):
    """A ``[BV, BK]`` tile (one warp, lanes along ``N``, ``BK / 32`` consecutive states a lane) summed over each
    lane's own states: ``[BV, 32]``, column ``l`` in lane ``l``, no data moved."""
    BV: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    return tl.sum(tl.reshape(x, [BV, 32, BK // 32]), 2)


@triton.jit
def _split4(x):
    """A ``[.., 4]`` tensor whose last axis a thread holds as its four parts ``x[.., 0]``, ``x[.., 1]``,
    ``x[.., 2]``, ``x[.., 3]`` (``tl.split`` twice: no data moved)."""
    y = tl.reshape(x, x.shape[:-1] + [2, 2])
    a, b = tl.split(y)
    x0, x2 = tl.split(a)
    x1, x3 = tl.split(b)
    return x0, x1, x2, x3


@triton.jit
def _row_dot(x, w):
    """``sum_rows x w`` of ``[4, BK]`` tiles as one chain of FFMAs per column: ``[BK]`` (``tl.sum`` of the products
    would add them in a tree, a multiply and an add for most elements)."""
    x0, x1, x2, x3 = _split4(tl.permute(x, (1, 0)))
    w0, w1, w2, w3 = _split4(tl.permute(w, (1, 0)))
    return x0 * w0 + x1 * w1 + x2 * w2 + x3 * w3


@triton.jit
def _row_dot2(x, w, y, u):
    """``sum_rows (x w + y u)`` of ``[4, BK]`` tiles as one chain of FFMAs per column, the two products of a row
    in turn: ``[BK]``."""
    x0, x1, x2, x3 = _split4(tl.permute(x, (1, 0)))
    w0, w1, w2, w3 = _split4(tl.permute(w, (1, 0)))
    y0, y1, y2, y3 = _split4(tl.permute(y, (1, 0)))
    u0, u1, u2, u3 = _split4(tl.permute(u, (1, 0)))
    return x0 * w0 + y0 * u0 + x1 * w1 + y1 * u1 + x2 * w2 + y2 * u2 + x3 * w3 + y3 * u3


@triton.jit
def _lane_dot(x, w):
    """``[BV, BK]`` tiles multiplied and summed over each 4 consecutive states as one chain of FFMAs: ``[BV, BK / 4]``.
    At 128 states (one warp, lanes along ``N``) those are each lane's own states, and column ``l`` is in lane ``l``
    (:func:`_lane_sums`)."""
    BV: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    x0, x1, x2, x3 = _split4(tl.reshape(x, [BV, BK // 4, 4]))
    w0, w1, w2, w3 = _split4(tl.reshape(w, [BV, BK // 4, 4]))
    return x0 * w0 + x1 * w1 + x2 * w2 + x3 * w3


@triton.jit
def _halves(x):
    """A ``[2 R, 32]`` tensor whose rows a thread holds as its first and second ``R`` rows (no data moved)."""
    R: tl.constexpr = x.shape[0] // 2
    return tl.split(tl.permute(tl.reshape(x, [2, R, 32]), (1, 2, 0)))


@triton.jit
def _scatter_rows(x):
    """The sums over the lanes of 8 channels' lane partials (``[8, 32]``, column ``l`` in lane ``l``) by one
    butterfly that reduce-scatters them: stages over lane bits 4, 3 and 2 keep half of the channels each, two more
    finish the sums (9 shuffles instead of 40). Returns ``[1, 32]``: lane ``l`` holds channel ``(l >> 2) & 7``'s."""
    a, b = _halves(x)
    a, b = _halves(_butterfly(a, b, STAGE16))
    a, b = _halves(_butterfly(a, b, STAGE8))
    return _plus_lane(_plus_lane(_butterfly(a, b, STAGE4), XOR2), XOR1)


@triton.jit
def _pair_rows(dv, dbeta, l_dv1, l_dv2, l_db1, l_db2, tok1, valid1, valid2, i_h, o_v,
               H: tl.constexpr, P: tl.constexpr, USE_BETA: tl.constexpr):
    """``dv`` (and ``dbeta``) of a pair's two tokens from their lane partials, stored: a butterfly over the lanes
    that reduce-scatters the four sums (two tokens x two gradients) instead of reducing each over all lanes (24
    shuffles a pair against 80 for ``BV`` 4), so that each lane ends with one token's sums of one gradient and a
    lane in 8 stores them, without a shared-memory conversion. Lane bit 4 picks the token, bit 3 the gradient."""
    if USE_BETA:
        s = _butterfly(_butterfly(l_dv1, l_dv2, STAGE16), _butterfly(l_db1, l_db2, STAGE16), STAGE8)
        EVERY: tl.constexpr = 8
    else:
        s = _plus_lane(_butterfly(l_dv1, l_dv2, STAGE16), XOR8)
        EVERY: tl.constexpr = 16
    s = _plus_lane(_plus_lane(_plus_lane(s, XOR4), XOR2), XOR1)
    lane = tl.arange(0, 32)[None, :]
    second = ((lane >> 4) & 1) == 1
    tok = tok1 + second.to(tl.int32)
    ok = tl.where(second, valid2, valid1) & ((lane & (EVERY - 1)) == 0) & (o_v[:, None] < P)
    if USE_BETA:
        base = tl.where(((lane >> 3) & 1) == 1, dbeta, dv)
    else:
        base = dv + tl.zeros_like(lane)
    tl.store(base + (tok * H + i_h) * P + o_v[:, None], s.to(dv.dtype.element_ty), mask=ok)


@triton.jit
def _pair_decay_grads(dg, l_dg1, l_dg2, tok1, valid1, valid2, i_h, H: tl.constexpr):
    """The decay gradients of a pair's two tokens from their lane partials (``CHAIN``), added: one butterfly stage
    over lane bit 4 leaves the first token's partials in the lanes whose bit is 0 and the second's in the others,
    four more finish both sums (5 shuffles a pair instead of 10), and lanes 0 and 16 add them with one atomic."""
    s = _butterfly(l_dg1, l_dg2, STAGE16)
    s = _plus_lane(_plus_lane(_plus_lane(_plus_lane(s, XOR8), XOR4), XOR2), XOR1)
    lane = tl.arange(0, 32)
    second = ((lane >> 4) & 1) == 1
    ok = tl.where(second, valid2, valid1) & ((lane & 15) == 0)
    tl.atomic_add(dg + (tok1 + second.to(tl.int32)) * H + i_h, s.to(dg.dtype.element_ty), mask=ok, sem="relaxed")


@triton.jit
def _load_readout_grads(q, dy, du, tok, valid, i_h, i_g, o_v, o_k, H: tl.constexpr, G: tl.constexpr,
                        P: tl.constexpr, N: tl.constexpr, USE_DU: tl.constexpr, ACC: tl.constexpr):
    """Query and output gradients of token ``tok`` (zeros for an invalid token)."""
    b_q = tl.load(q + (tok * G + i_g) * N + o_k, mask=o_k < tl.where(valid, N, 0), other=0).to(ACC)
    m_v = o_v < tl.where(valid, P, 0)
    b_dy = tl.load(dy + (tok * H + i_h) * P + o_v, mask=m_v, other=0).to(ACC)
    if USE_DU:
        b_du = tl.load(du + (tok * H + i_h) * P + o_v, mask=m_v, other=0).to(ACC)
    else:
        b_du = b_dy
    return b_q, b_dy, b_du


@triton.jit
def _prefetch(p):
    """Ask for the 128-byte lines at pointers ``p`` in L1 (``prefetch.global.L1``): nothing is returned or waited
    for, so the loads that later read them hit L1 instead of waiting on L2."""
    tl.inline_asm_elementwise("prefetch.global.L1 [$1];\n\tmov.u32 $0, 0;", "=r,l", [p], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _prefetch_block(v, k, q, g, beta, dy, du, tok0, t_last, i_h, i_g, i_v,
                    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BV: tl.constexpr,
                    BS: tl.constexpr, USE_BETA: tl.constexpr, USE_DU: tl.constexpr, READOUT: tl.constexpr):
    """Prefetch the inputs of the ``BS`` tokens from ``tok0`` (clamped to ``t_last``) into L1: their key rows, the
    program's value, gain and decay lines and, with ``READOUT``, their query rows and output-gradient lines."""
    o_t = tl.minimum(tok0 + tl.arange(0, BS), t_last)
    # the key row's 128-byte lines (at least one; a constexpr branch rather than max(), which Triton 3.5 does not
    # keep a constexpr)
    BITS: tl.constexpr = k.dtype.element_ty.primitive_bitwidth
    if N * BITS >= 1024:
        o_l = tl.arange(0, N * BITS // 1024) * (1024 // BITS)
    else:
        o_l = tl.arange(0, 1)
    o_row = ((o_t * G + i_g) * N)[:, None] + o_l[None, :]
    _prefetch(k + o_row)
    o_c = (o_t * H + i_h) * P + i_v * BV
    _prefetch(v + o_c)
    _prefetch(g + o_t * H + i_h)
    if USE_BETA:
        _prefetch(beta + o_c)
    if READOUT:
        _prefetch(q + o_row)
        _prefetch(dy + o_c)
        if USE_DU:
            _prefetch(du + o_c)


@triton.jit
def _block_fits(g, tok0, i_h, H: tl.constexpr, BS: tl.constexpr):
    """Whether the ``BS`` tokens from ``tok0`` (a whole block) can be walked in rescaled states
    (:func:`_rescaled_block`): their log decays' magnitudes sum to at most ``RESCALE_TAU``, so that no scale of the
    walk passes ``e^RESCALE_TAU`` (nor falls below its inverse). One uniform test a block: a block of faster decays
    walks plainly, as exactly. Every thread sums them itself (scalar loads, L1 hits: the walk loads them too)."""
    b_t = tl.zeros([], dtype=tl.float32)
    for s in tl.static_range(BS):
        b_t += tl.abs(tl.load(g + (tok0 + s) * H + i_h).to(tl.float32))
    return b_t <= RESCALE_TAU


@triton.jit
def _plain_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k,
                 H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BS: tl.constexpr,
                 USE_BETA: tl.constexpr, TRANS: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr):
    """The state after the ``BS`` tokens from ``tok``: two instructions per state and token (:func:`_update`)."""
    for s in tl.static_range(BS):
        b_k, b_v, b_a, b_b = _load_token(v, k, g, beta, tok + s, valid, i_h, i_g, o_v, o_k, H, G, P, N, USE_BETA,
                                         ACC, FAST_EXP)
        b_m, b_i = _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA, TRANS)
    return b_m, b_i


@triton.jit
def _rescaled_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k,
                    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BS: tl.constexpr,
                    USE_BETA: tl.constexpr, TRANS: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr):
    """:func:`_plain_block` in rescaled states: with ``A`` the decay since ``tok`` it walks ``M' = M / A`` and
    ``J' = (I - I_prior) / A``, whose updates are one FFMA per state (``M' += v (k / A)``, ``J' += beta (k^2 /
    A)``; the scale costs two multiplies per key element, not per state), and scales back once at the end (``M = A
    M'``, ``I = A J' + I_prior``). Exact in exact arithmetic; never divides by a decay (``1 / A`` is the exponential
    of the negated log decays' sum). The caller keeps ``1 / A`` bounded (:func:`_block_fits`)."""
    b_j = b_i - b_ip
    b_s = tl.zeros([], dtype=ACC)  # -log A
    for s in tl.static_range(BS):
        b_k, b_v, b_l, b_b = _load_token_log(v, k, g, beta, tok + s, valid, i_h, i_g, o_v, o_k, H, G, P, N,
                                             USE_BETA, ACC)
        b_s -= b_l
        b_ke = b_k * _exp(b_s, FAST_EXP)
        b_m += _rows(b_v, TRANS) * _cols(b_ke, TRANS)
        if USE_BETA:
            b_j += _rows(b_b, TRANS) * _cols(b_k * b_ke, TRANS)
    b_w = _exp(-b_s, FAST_EXP)
    return b_m * b_w, b_j * b_w + b_ip


@triton.jit
def _advance_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k,
                   H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BS: tl.constexpr,
                   USE_BETA: tl.constexpr, TRANS: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr = False,
                   RESCALE: tl.constexpr = False):
    """The state after the ``BS`` tokens from ``tok``, a whole block (pass A of the backward's recompute: updates,
    no readout); with ``RESCALE`` in rescaled states where the block allows it (:func:`_block_fits`)."""
    if RESCALE:
        if _block_fits(g, tok, i_h, H, BS):
            b_m, b_i = _rescaled_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N,
                                       BS, USE_BETA, TRANS, ACC, FAST_EXP)
        else:
            b_m, b_i = _plain_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N, BS,
                                    USE_BETA, TRANS, ACC, FAST_EXP)
    else:
        b_m, b_i = _plain_block(v, k, g, beta, b_m, b_i, b_ip, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N, BS,
                                USE_BETA, TRANS, ACC, FAST_EXP)
    return b_m, b_i


@triton.jit
def _walk_to_group(v, k, g, beta, p_m0, p_i0, o_s, m_s, b_ip, tok0, n_groups, i_h, i_g, o_v, o_k,
                   H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, GROUP: tl.constexpr,
                   USE_BETA: tl.constexpr, TRANS: tl.constexpr, ACC: tl.constexpr, FAST_EXP: tl.constexpr = False):
    """The state before group ``n_groups`` of a block: the block start (at ``p_m0``, ``p_i0``) walked over the
    ``GROUP * n_groups`` tokens from ``tok0``, ``GROUP`` tokens an iteration (plainly: in rescaled states, as pass A
    runs, these walks measured slower; docs/kernels.md)."""
    b_m = tl.load(p_m0 + o_s, mask=m_s, other=0)
    b_i = tl.load(p_i0 + o_s, mask=m_s, other=1)
    for s in range(n_groups):
        for w in tl.static_range(GROUP):
            b_k, b_v, b_a, b_b = _load_token(v, k, g, beta, tok0 + GROUP * s + w, s >= 0, i_h, i_g, o_v, o_k,
                                             H, G, P, N, USE_BETA, ACC, FAST_EXP)
            b_m, b_i = _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA, TRANS)
    return b_m, b_i


@triton.jit
def _reverse_in_quad(
    v, k, g, beta, b_m, b_i, b_dm, b_di, b_an, b_k, b_v, b_a, b_b, b_q, b_dy, b_du, tok, valid, i_h, i_g,
    o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, USE_BETA: tl.constexpr,
    USE_DU: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr, ACC: tl.constexpr, RELOAD: tl.constexpr,
):
    """A quad's reverse step (the decay gradient from the token's own state); with ``RELOAD`` its inputs are loaded
    again (L1 hits) instead of kept live since the update, which spares registers."""
    if RELOAD:
        b_k, b_v, b_a, b_b = _load_token(v, k, g, beta, tok, valid, i_h, i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC)
    return _reverse_step(b_m, b_i, b_m, b_i, b_dm, b_di, b_an, b_k, b_v, b_a, b_b, b_q, b_dy, b_du, tok, valid,
                         i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip, H, G, P, N, USE_BETA, USE_DU, TRANS,
                         FAST_RCP, ACC, True)


@triton.jit
def _reverse_chunk(
    v, k, q, g, beta, ck_m, ck_i, dy, du, sc_m, sc_i, dv, dk, dq, dg, dbeta, b_dm, b_di, b_an, b_ip,
    i_c, i_v, o_sc, bos, T, boc, i_h, i_g, o_v, o_k, m_s, o_s,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr,
    BS: tl.constexpr, USE_BETA: tl.constexpr, USE_DU: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr,
    ACC: tl.constexpr, SLAB_FROM_CHECKPOINT: tl.constexpr = False, GROUP: tl.constexpr = 2,
    GAUGE: tl.constexpr = False, RELOAD: tl.constexpr = False, PREFETCH: tl.constexpr = False,
    PROBE: tl.constexpr = 0, PAIRSUM: tl.constexpr = False, CHAIN: tl.constexpr = False,
    FAST_EXP: tl.constexpr = False, RESCALE: tl.constexpr = False,
):
    """The reverse steps of chunk ``i_c`` from the adjoints ``(b_dm, b_di)`` (and decay ``b_an``) of the step after
    it: pass A and pass B of the module docstring, the tokens' gradients written or added; returns the adjoints
    and decay of the chunk's first token. Shared by the sequential backward and the chunk-parallel one's local
    pass (chunked_bwd.py). ``SLAB_FROM_CHECKPOINT``: the first block starts at the checkpoint, read where it is,
    so the slab holds one state pair fewer (:func:`slab_states`). ``GROUP``: the tokens recomputed together from
    the block start, 2 (pairs) or 4 (quads: 2.5 state updates a token at ``BS`` 8 instead of 3.5, four states live
    instead of three; always with ``GAUGE``, :func:`_reverse_step`, which frees the state before each token).
    ``PREFETCH`` (a GPU only: inline PTX): the next block's inputs are prefetched into L1 while a block is walked,
    so that a block's first touches hit L1 instead of waiting on L2. ``RESCALE``: pass A runs rescaled states
    (:func:`_rescaled_block`: one FFMA per state and token instead of two) over every block whose decays allow it
    (:func:`_block_fits`)."""
    t0 = i_c * CT
    nb = tl.cdiv(tl.minimum(CT, T - t0), BS)
    # pass A: re-run the chunk forward from its checkpoint, leave every BS-th state in the scratch slab
    tl.debug_barrier()
    o_ck = (((boc + i_c) * H + i_h) * P + i_v * BV) * N
    b_m = tl.load(ck_m + o_ck + o_s, mask=m_s, other=0)
    b_i = tl.load(ck_i + o_ck + o_s, mask=m_s, other=1)
    t_last = bos + T - 1
    if SLAB_FROM_CHECKPOINT:  # block j + 1 starts at slot j
        for j in range(nb - 1):
            if PREFETCH:  # the next block's inputs, while this one's are used
                _prefetch_block(v, k, q, g, beta, dy, du, bos + t0 + (j + 1) * BS, t_last, i_h, i_g, i_v,
                                H, G, P, N, BV, BS, USE_BETA, USE_DU, False)
            # PROBE bits (timing only, wrong gradients): 8 leaves out pass A, 2 its slab stores (masked off by a
            # condition the compiler cannot know false, so that pass A is still computed), 32 has pass B start every
            # block at the checkpoint (an L1 or L2 hit) instead of the slab
            if (PROBE & 8) == 0:
                b_m, b_i = _advance_block(v, k, g, beta, b_m, b_i, b_ip, bos + t0 + j * BS, j >= 0, i_h, i_g, o_v, o_k,
                                          H, G, P, N, BS, USE_BETA, TRANS, ACC, FAST_EXP, RESCALE)
                m_st = m_s
                if (PROBE & 2) != 0:
                    m_st = m_s & (t_last < 0)
                tl.store(sc_m + (o_sc + j * BV * N) + o_s, b_m, mask=m_st)
                tl.store(sc_i + (o_sc + j * BV * N) + o_s, b_i, mask=m_st)
    else:  # block j starts at slot j
        for j in range(nb):
            tl.store(sc_m + (o_sc + j * BV * N) + o_s, b_m, mask=m_s)
            tl.store(sc_i + (o_sc + j * BV * N) + o_s, b_i, mask=m_s)
            if PREFETCH:
                _prefetch_block(v, k, q, g, beta, dy, du, bos + t0 + (j + 1) * BS, t_last, i_h, i_g, i_v,
                                H, G, P, N, BV, BS, USE_BETA, USE_DU, False)
            if j < nb - 1:
                b_m, b_i = _advance_block(v, k, g, beta, b_m, b_i, b_ip, bos + t0 + j * BS, j >= 0, i_h, i_g, o_v, o_k,
                                          H, G, P, N, BS, USE_BETA, TRANS, ACC, FAST_EXP, RESCALE)
    tl.debug_barrier()
    # pass B: blocks in reverse, groups (pairs or quads) of tokens in reverse inside a block, each group
    # recomputed from the block start
    for i_jr in range(nb):
        j = nb - 1 - i_jr
        tb = t0 + j * BS
        if SLAB_FROM_CHECKPOINT:
            if (PROBE & 40) != 0:
                p_m0, p_i0 = ck_m + o_ck, ck_i + o_ck
            elif j == 0:
                p_m0, p_i0 = ck_m + o_ck, ck_i + o_ck
            else:
                p_m0, p_i0 = sc_m + (o_sc + (j - 1) * BV * N), sc_i + (o_sc + (j - 1) * BV * N)
        else:
            p_m0, p_i0 = sc_m + (o_sc + j * BV * N), sc_i + (o_sc + j * BV * N)
        ne = tl.minimum(BS, T - tb)
        if PREFETCH:  # the block before, walked next; its first touches would wait on L2
            if j > 0:
                _prefetch_block(v, k, q, g, beta, dy, du, bos + tb - BS, t_last, i_h, i_g, i_v,
                                H, G, P, N, BV, BS, USE_BETA, USE_DU, True)
        if GROUP == 2:
            n_pairs = (ne + 1) // 2
            for i_pr in range(n_pairs):
                i_p = n_pairs - 1 - i_pr
                tok1 = bos + tb + 2 * i_p
                valid2 = 2 * i_p + 1 < ne
                # the pair's queries and output gradients: first touches, issued before the walk hides them
                b_q1, b_dy1, b_du1 = _load_readout_grads(q, dy, du, tok1, i_p >= 0, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                b_q2, b_dy2, b_du2 = _load_readout_grads(q, dy, du, tok1 + 1, valid2, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                # the block start, reloaded for every pair (an L1 hit) rather than held in registers, walked to
                # the pair
                b_m0, b_i0 = _walk_to_group(v, k, g, beta, p_m0, p_i0, o_s, m_s, b_ip, bos + tb, i_p, i_h, i_g,
                                            o_v, o_k, H, G, P, N, 2, USE_BETA, TRANS, ACC, FAST_EXP)
                b_m1, b_i1, b_k1, b_v1, b_a1, b_b1 = _step(
                    v, k, g, beta, b_m0, b_i0, b_ip, tok1, i_p >= 0, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC, FAST_EXP)
                b_m2, b_i2, b_k2, b_v2, b_a2, b_b2 = _step(
                    v, k, g, beta, b_m1, b_i1, b_ip, tok1 + 1, valid2, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC, FAST_EXP)
                if CHAIN:  # every sum an FFMA chain; with PAIRSUM the pair's reduced together
                    b_dm, b_di, b_an, l_dv2, l_db2, l_dg2 = _chained_step(
                        b_m2, b_i2, b_m1, b_i1, b_dm, b_di, b_an, b_k2, b_v2, b_a2, b_b2, b_q2, b_dy2, b_du2,
                        tok1 + 1, valid2, i_g, o_k, dk, dq, b_ip, G, N, USE_BETA, USE_DU, FAST_RCP, PROBE)
                    if not PAIRSUM:
                        _token_rows(dv, dbeta, dg, l_dv2, l_db2, l_dg2, tok1 + 1, valid2, i_h, o_v, H, P, USE_BETA,
                                    PROBE)
                    b_dm, b_di, b_an, l_dv1, l_db1, l_dg1 = _chained_step(
                        b_m1, b_i1, b_m0, b_i0, b_dm, b_di, b_an, b_k1, b_v1, b_a1, b_b1, b_q1, b_dy1, b_du1,
                        tok1, i_p >= 0, i_g, o_k, dk, dq, b_ip, G, N, USE_BETA, USE_DU, FAST_RCP, PROBE)
                    if PAIRSUM:
                        if (PROBE & 4) == 0:
                            _pair_rows(dv, dbeta, l_dv1, l_dv2, l_db1, l_db2, tok1, i_p >= 0, valid2, i_h, o_v,
                                       H, P, USE_BETA)
                        if (PROBE & 16) == 0:
                            _pair_decay_grads(dg, l_dg1, l_dg2, tok1, i_p >= 0, valid2, i_h, H)
                    else:
                        _token_rows(dv, dbeta, dg, l_dv1, l_db1, l_dg1, tok1, i_p >= 0, i_h, o_v, H, P, USE_BETA,
                                    PROBE)
                elif PAIRSUM:  # dv, dbeta of both tokens reduced together (_pair_rows)
                    b_dm, b_di, b_an, l_dv2, l_db2 = _reverse_step(
                        b_m2, b_i2, b_m1, b_i1, b_dm, b_di, b_an, b_k2, b_v2, b_a2, b_b2, b_q2, b_dy2, b_du2,
                        tok1 + 1, valid2, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                        H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, GAUGE, PROBE, True)
                    b_dm, b_di, b_an, l_dv1, l_db1 = _reverse_step(
                        b_m1, b_i1, b_m0, b_i0, b_dm, b_di, b_an, b_k1, b_v1, b_a1, b_b1, b_q1, b_dy1, b_du1,
                        tok1, i_p >= 0, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                        H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, GAUGE, PROBE, True)
                    if (PROBE & 4) == 0:
                        _pair_rows(dv, dbeta, l_dv1, l_dv2, l_db1, l_db2, tok1, i_p >= 0, valid2, i_h, o_v,
                                   H, P, USE_BETA)
                else:
                    b_dm, b_di, b_an = _reverse_step(
                        b_m2, b_i2, b_m1, b_i1, b_dm, b_di, b_an, b_k2, b_v2, b_a2, b_b2, b_q2, b_dy2, b_du2,
                        tok1 + 1, valid2, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                        H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, GAUGE, PROBE)
                    b_dm, b_di, b_an = _reverse_step(
                        b_m1, b_i1, b_m0, b_i0, b_dm, b_di, b_an, b_k1, b_v1, b_a1, b_b1, b_q1, b_dy1, b_du1,
                        tok1, i_p >= 0, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                        H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, GAUGE, PROBE)
        else:
            tl.static_assert(GROUP == 4, "GROUP is 2 or 4")
            n_quads = (ne + 3) // 4
            for i_qr in range(n_quads):
                i_p = n_quads - 1 - i_qr
                tok1 = bos + tb + 4 * i_p
                valid2 = 4 * i_p + 1 < ne
                valid3 = 4 * i_p + 2 < ne
                valid4 = 4 * i_p + 3 < ne
                b_q1, b_dy1, b_du1 = _load_readout_grads(q, dy, du, tok1, i_p >= 0, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                b_q2, b_dy2, b_du2 = _load_readout_grads(q, dy, du, tok1 + 1, valid2, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                b_q3, b_dy3, b_du3 = _load_readout_grads(q, dy, du, tok1 + 2, valid3, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                b_q4, b_dy4, b_du4 = _load_readout_grads(q, dy, du, tok1 + 3, valid4, i_h, i_g, o_v, o_k,
                                                         H, G, P, N, USE_DU, ACC)
                b_m1, b_i1 = _walk_to_group(v, k, g, beta, p_m0, p_i0, o_s, m_s, b_ip, bos + tb, i_p, i_h, i_g,
                                            o_v, o_k, H, G, P, N, 4, USE_BETA, TRANS, ACC)
                b_m1, b_i1, b_k1, b_v1, b_a1, b_b1 = _step(
                    v, k, g, beta, b_m1, b_i1, b_ip, tok1, i_p >= 0, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC)
                b_m2, b_i2, b_k2, b_v2, b_a2, b_b2 = _step(
                    v, k, g, beta, b_m1, b_i1, b_ip, tok1 + 1, valid2, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC)
                b_m3, b_i3, b_k3, b_v3, b_a3, b_b3 = _step(
                    v, k, g, beta, b_m2, b_i2, b_ip, tok1 + 2, valid3, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC)
                b_m4, b_i4, b_k4, b_v4, b_a4, b_b4 = _step(
                    v, k, g, beta, b_m3, b_i3, b_ip, tok1 + 3, valid4, i_h, i_g, o_v, o_k,
                    H, G, P, N, USE_BETA, TRANS, ACC)
                b_dm, b_di, b_an = _reverse_in_quad(
                    v, k, g, beta, b_m4, b_i4, b_dm, b_di, b_an, b_k4, b_v4, b_a4, b_b4, b_q4, b_dy4, b_du4,
                    tok1 + 3, valid4, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                    H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, RELOAD)
                b_dm, b_di, b_an = _reverse_in_quad(
                    v, k, g, beta, b_m3, b_i3, b_dm, b_di, b_an, b_k3, b_v3, b_a3, b_b3, b_q3, b_dy3, b_du3,
                    tok1 + 2, valid3, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                    H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, RELOAD)
                b_dm, b_di, b_an = _reverse_in_quad(
                    v, k, g, beta, b_m2, b_i2, b_dm, b_di, b_an, b_k2, b_v2, b_a2, b_b2, b_q2, b_dy2, b_du2,
                    tok1 + 1, valid2, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                    H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, RELOAD)
                b_dm, b_di, b_an = _reverse_in_quad(
                    v, k, g, beta, b_m1, b_i1, b_dm, b_di, b_an, b_k1, b_v1, b_a1, b_b1, b_q1, b_dy1, b_du1,
                    tok1, i_p >= 0, i_h, i_g, o_v, o_k, dv, dk, dq, dg, dbeta, b_ip,
                    H, G, P, N, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, RELOAD)
    return b_dm, b_di, b_an


@triton.jit
def palimpsa_bwd_kernel(
    v, k, q, g, beta, m0, i0, ip, ck_m, ck_i, dy, du, dmT, diT, sc_m, sc_i,
    dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, chunk_offsets, T,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
    BV: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, BS: tl.constexpr,
    USE_BETA: tl.constexpr, USE_INITIAL_STATE: tl.constexpr, USE_INITIAL_IMPORTANCE: tl.constexpr,
    USE_FINAL_STATE_GRADIENT: tl.constexpr, USE_DU: tl.constexpr, IS_VARLEN: tl.constexpr, TRANS: tl.constexpr,
    FAST_RCP: tl.constexpr, ACC: tl.constexpr, GROUP: tl.constexpr = 2, GAUGE: tl.constexpr = False,
    RELOAD: tl.constexpr = False, PREFETCH: tl.constexpr = False, PAIRSUM: tl.constexpr = False,
    CHAIN: tl.constexpr = False, FAST_EXP: tl.constexpr = False, RESCALE: tl.constexpr = False,
):
    i_v, i_nh, i_h, i_g, bos, T, boc, o_v, o_k, m_s, o_s, o_state = _program(
        cu_seqlens, chunk_offsets, T, H, G, P, N, BV, BK, CT, IS_VARLEN, TRANS)
    # this program's scratch slab: CT // BS state pairs of [BV, N]
    o_sc = (i_nh.to(tl.int64) * tl.num_programs(0) + i_v) * (CT // BS) * BV * N
    b_ip = tl.load(ip).to(ACC)

    if USE_FINAL_STATE_GRADIENT:
        b_dm = tl.load(dmT + o_state + o_s, mask=m_s, other=0).to(ACC)
        b_di = tl.load(diT + o_state + o_s, mask=m_s, other=0).to(ACC)
    else:
        b_dm = tl.zeros(o_s.shape, dtype=ACC)
        b_di = tl.zeros(o_s.shape, dtype=ACC)
    b_an = tl.full([], 1, dtype=ACC)

    NT = tl.cdiv(T, CT)
    for i_r in range(NT):
        b_dm, b_di, b_an = _reverse_chunk(
            v, k, q, g, beta, ck_m, ck_i, dy, du, sc_m, sc_i, dv, dk, dq, dg, dbeta, b_dm, b_di, b_an, b_ip,
            NT - 1 - i_r, i_v, o_sc, bos, T, boc, i_h, i_g, o_v, o_k, m_s, o_s,
            H, G, P, N, BV, CT, BS, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, GROUP=GROUP, GAUGE=GAUGE, RELOAD=RELOAD,
            PREFETCH=PREFETCH, PAIRSUM=PAIRSUM, CHAIN=CHAIN, FAST_EXP=FAST_EXP, RESCALE=RESCALE)

    if USE_INITIAL_STATE:
        tl.store(dm0 + o_state + o_s, (b_dm * b_an).to(dm0.dtype.element_ty), mask=m_s)
    if USE_INITIAL_IMPORTANCE:
        tl.store(di0 + o_state + o_s, (b_di * b_an).to(di0.dtype.element_ty), mask=m_s)


@triton.jit
def palimpsa_step_kernel(
    v, k, q, g, beta, ip, m, i, y, u,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr,
    USE_BETA: tl.constexpr, USE_UNCERTAINTY: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr,
    ACC: tl.constexpr,
):
    """One decoding step: ``(M, I)`` of every (sequence, head) updated in place, ``y`` (and ``u``) written."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_h = i_nh % H
    i_g = i_h // (H // G)
    o_v = i_v * BV + tl.arange(0, BV)
    o_k = tl.arange(0, BK)
    m_s = _rows(o_v < P, TRANS) & _cols(o_k < N, TRANS)
    p_s = (i_nh.to(tl.int64) * P + i_v * BV) * N + (_rows(tl.arange(0, BV) * N, TRANS) + _cols(o_k, TRANS))
    tok = i_nh // H  # one token per sequence: the batch index takes the token's place
    b_ip = tl.load(ip).to(ACC)
    b_k, b_v, b_a, b_b = _load_token(v, k, g, beta, tok, tok >= 0, i_h, i_g, o_v, o_k, H, G, P, N, USE_BETA, ACC)
    b_q = tl.load(q + (tok * G + i_g) * N + o_k, mask=o_k < N, other=0).to(ACC)
    b_m = tl.load(m + p_s, mask=m_s, other=0).to(ACC)
    b_i = tl.load(i + p_s, mask=m_s, other=1).to(ACC)
    b_m, b_i = _update(b_m, b_i, b_k, b_v, b_a, b_b, b_ip, USE_BETA, TRANS)
    tl.store(m + p_s, b_m.to(m.dtype.element_ty), mask=m_s)
    tl.store(i + p_s, b_i.to(i.dtype.element_ty), mask=m_s)
    b_r = _reciprocal(b_i, FAST_RCP)
    b_y = _sum_n(b_m * b_r * _cols(b_q, TRANS), TRANS)
    tl.store(y + (tok * H + i_h) * P + o_v, b_y.to(y.dtype.element_ty), mask=o_v < P)
    if USE_UNCERTAINTY:
        b_u = _sum_n(b_r * _cols(b_q * b_q, TRANS), TRANS)
        tl.store(u + (tok * H + i_h) * P + o_v, b_u.to(u.dtype.element_ty), mask=o_v < P)


@functools.lru_cache(maxsize=64)
def _prior_tensor(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``I_prior`` as a one-element device tensor (exact in float64), made once per value: no copy per call."""
    return torch.tensor([value], dtype=dtype, device=device)


def _acc_dtype(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def on_device(tensor: torch.Tensor):
    """The context a launch on ``tensor``'s GPU runs in: Triton launches on the current device, which need not be
    the tensor's where a model's layers are spread over several GPUs (no-op off the GPU)."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()


def _compiled(tensor: torch.Tensor) -> bool:
    """Whether the kernels run compiled on a GPU (not under the interpreter)."""
    return tensor.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"


def _fast_rcp(tensor: torch.Tensor) -> bool:
    """The PTX reciprocal needs float32 states and a real GPU (not the interpreter)."""
    return _compiled(tensor) and tensor.dtype != torch.float64


def _fast_exp(tensor: torch.Tensor, config: dict) -> bool:
    """Whether the backward's recompute takes each decay from one ``ex2.approx.ftz`` (:func:`_exp`): the config's
    ``FAST_EXP`` (default on), where the PTX reciprocal runs too (:func:`_fast_rcp`)."""
    return bool(config.get("FAST_EXP", True)) and _fast_rcp(tensor)


def _rescales(config: dict, default: bool) -> bool:
    """Whether the walks run rescaled states, by the config's ``RESCALE`` (plain Triton: the interpreter runs it
    too): the forward's (``palimpsa_fwd_kernel``'s, :func:`_rescaled_fwd_token`) or the backward's pass A
    (``_reverse_chunk``'s, :func:`_rescaled_block`)."""
    return bool(config.get("RESCALE", default))


def _prefetches(tensor: torch.Tensor, config: dict) -> bool:
    """Whether the backward prefetches each block's inputs into L1 (``_reverse_chunk``'s ``PREFETCH``): the
    config's ``PREFETCH`` (default on), on a real GPU only (inline PTX: not under the interpreter)."""
    return bool(config.get("PREFETCH", True)) and _compiled(tensor)


def _pair_sums(v: torch.Tensor, beta: torch.Tensor | None, config: dict, block_k: int) -> bool:
    """``PAIRSUM`` (:func:`_pair_rows`; on unless the config turns it off): on a real GPU (inline PTX), float32
    states, the tiling it assumes (one warp, lanes along ``N``, pairs, no ``GAUGE``) and ``dv``, ``dbeta`` of one
    dtype. Measured faster in both backwards (docs/bench/chunked-pairsum-2026-11-27).

    Only at 128 states (every Mamba2 release): the butterflies need lane ``l`` to hold column ``l`` of the lane
    partials, which Triton's layout gives there (3.5.1 to 3.9, any ``BV``; ``chunked_bwd.compile_launch``
    reports it), and not at 64 or 256, where it spreads the lanes over the channels too."""
    return (bool(config.get("PAIRSUM", True)) and _compiled(v) and v.dtype != torch.float64
            and not config.get("TRANS", False) and int(config.get("num_warps", 1)) == 1
            and int(config.get("GROUP", 2)) == 2 and not config.get("GAUGE", False) and block_k == 128
            and (beta is None or beta.dtype == v.dtype))


def _chains(config: dict, block_v: int, block_k: int, gpu: bool) -> bool:
    """``CHAIN`` (:func:`_chained_step`): the reverse step's sums as FFMA chains, which split the tile's 4 channels
    and each 4 consecutive states of a thread: one-warp programs of 4 channels, pairs without ``GAUGE`` or
    ``TRANS``. The config's ``CHAIN``: absent or None, on a GPU (``gpu``) only; 1 also under the interpreter (no
    inline PTX of its own; there it costs the CPU tests a third more time, so those that check it ask for it); 0
    off. On a GPU at 128 states only, where a thread holds the 4 consecutive states it splits and the GPU measured
    it faster (docs/bench/chunked-chain-2026-11-27); at 64 Triton's layout spreads them and the splits cost
    shuffles."""
    wanted = config.get("CHAIN")
    return (bool(gpu if wanted is None else wanted) and block_v == 4 and block_k % 4 == 0 and block_k >= 4
            and (block_k == 128 or not gpu) and not config.get("TRANS", False)
            and int(config.get("num_warps", 1)) == 1 and int(config.get("GROUP", 2)) == 2
            and not config.get("GAUGE", False))


def _scatters(config: dict, block_v: int, block_k: int, v: torch.Tensor) -> bool:
    """``SCATTER`` (:func:`_fwd_token`; on unless the config says ``SCATTER: 0``): the forward's readout summed by
    one butterfly over the lanes (inline PTX: on a GPU only) in the tiling it assumes: one warp of 8 channels,
    lanes along 128 states (the chunk walk's, ``chunked_fwd.WALK_CONFIG``; ``chunked_fwd.compile_kernels``
    reports the lanes' layout)."""
    return (bool(config.get("SCATTER", True)) and _compiled(v) and block_v == 8 and block_k == 128
            and not config.get("TRANS", False) and int(config.get("num_warps", 1)) == 1)


def _float32_keys(k: torch.Tensor, q: torch.Tensor, on: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and queries a launch reads: float32 copies of 16-bit ones where ``on`` (a config's ``KQ32``: on by
    default in the chunk walk, the chunk-parallel backward's local pass and the sequential backward), so that its
    walks load them without unpacking bf16; themselves otherwise. A copy is ``B x T x G x N`` floats, 4 MB at
    B = 1, L = 8192 and one group of 128 states, and is exact."""
    if on and k.element_size() == 2:
        return k.float(), q.float()
    return k, q


def _launch_config(config: dict, head_dim: int) -> tuple[int, dict]:
    """``(BV, the remaining launch options)`` of a config, ``BV`` clipped to the head dimension."""
    config = dict(config)
    return min(config.pop("BV"), triton.next_power_of_2(head_dim)), config


@functools.lru_cache(maxsize=8)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def split_rows(rows: int, most: int) -> tuple[int, int]:
    """``(programs, rows each)`` for ``rows`` shared among at most ``most`` programs, each taking a run of
    consecutive rows (the last one fewer); at least one program, which sums nothing where there are no rows. The
    backward passes of the fused elementwise ops that sum a parameter's gradient over tokens split them so."""
    per_program = max(1, triton.cdiv(rows, max(1, min(rows, most))))
    return max(1, triton.cdiv(rows, per_program)), per_program


def programs_per_gpu(tensor: torch.Tensor, per_sm: int) -> int:
    """``per_sm`` programs an SM of ``tensor``'s GPU, or 4 where the kernels do not run compiled (the interpreter)."""
    return per_sm * _sm_count(tensor.device) if _compiled(tensor) else 4


def _backward_config(n_states: int, heads: int, head_dim: int, device: torch.device) -> dict:
    """``BWD_CONFIG``, with ``BV = SMALL_GRID_BV`` where ``BWD_CONFIG``'s grid would fill less than two waves.

    A one-warp backward program with ``BV = 4`` takes ~220 registers, so 8 fit an SM (the 8 below assumes that
    configuration): at B = 1 and 2.7b shapes ``BV = 4`` gives 1280 programs on 132 SMs (1.2 waves) and ``BV = 2``
    ran 13% faster; at B = 4 (5120 programs) ``BV = 4`` was the faster (docs/bench/scan-notes.md, section 5).
    """
    if not torch.cuda.is_available() or device.type != "cuda":
        return BWD_CONFIG
    programs = n_states * heads * triton.cdiv(head_dim, BWD_CONFIG["BV"])
    if programs < 2 * 8 * _sm_count(device):
        return {**BWD_CONFIG, "BV": SMALL_GRID_BV}
    return BWD_CONFIG


def _forward_config(n_states: int, heads: int, head_dim: int, device: torch.device) -> dict:
    """``ONE_WARP_FWD_CONFIG`` where its grid gives every SM ``ONE_WARP_PROGRAMS_PER_SM`` programs or more (B = 4 at
    2.7b shapes: 2560 programs on 132 SMs), else ``FWD_CONFIG``, whose four-warp programs keep a short grid's SMs
    busier (B = 1: 640 one-warp programs would leave an SM five warps). With initial states in, their load fixes the
    one-warp walk's layout to 32 lanes along N, and it still wins (B = 4, L = 8192 on an H100: 12.80 ms against
    FWD_CONFIG's 13.69)."""
    if not torch.cuda.is_available() or device.type != "cuda":
        return FWD_CONFIG
    programs = n_states * heads * triton.cdiv(head_dim, ONE_WARP_FWD_CONFIG["BV"])
    if programs >= ONE_WARP_PROGRAMS_PER_SM * _sm_count(device):
        return ONE_WARP_FWD_CONFIG
    return FWD_CONFIG


def default_forward_config(v: torch.Tensor, cu_seqlens: torch.Tensor | None, chunk_size: int,
                           forward: str = "auto") -> dict:
    """The forward's config where the caller gives none, as ``PALIMPSA_TRITON_FORWARD``'s value ``forward``
    decides: ``{"kernel": "chunked"}`` (asked for, or under ``auto`` where :func:`chunked_forward_by_default` holds
    and the sequential grid leaves the GPU short, ``chunked_fwd.worth_it``; where it cannot run, chunked_fwd says
    so), else the sequential forward's tiling (:func:`_forward_config`). A one-token call always walks
    sequentially."""
    if v.shape[1] > 1 and _chunked_available("chunked_fwd") and (
            forward == "chunked" or (forward == "auto" and chunked_forward_by_default(v) and _chunked_forward_pays(
                v, cu_seqlens, chunk_size))):
        return {"kernel": "chunked"}
    return _forward_config(_n_states(v.shape[0], cu_seqlens), v.shape[2], v.shape[3], v.device)


@functools.lru_cache(maxsize=2)
def _chunked_available(module: str = "chunked_bwd") -> bool:
    """Whether ``module`` (chunked_bwd.py, chunked_fwd.py) sits beside this module: the copy that travels with a
    model's weights comes alone (io/remote_code.py), and runs the sequential kernels."""
    try:
        return bool(__package__) and importlib.util.find_spec(f"{__package__}.{module}") is not None
    except (ImportError, ValueError):
        return False


def chunked_by_default(v: torch.Tensor) -> bool:
    """Whether ``auto`` takes the chunk-parallel backward: on CUDA, where its corrections run in TF32, that is for
    16-bit inputs and for float32 ones under ``torch.set_float32_matmul_precision("high")`` (or "medium"). There it
    was the faster on an H100: 16.4 against 24.7 ms at B = 1, L = 8192, bf16; 0.46x against 0.39x the plain
    model's tokens/s with all 64 layers of a 2.7b model upgraded (docs/bench/chunked-bwd-h100-2026-11-24). Its
    IEEE float32 corrections cost what the split saves (0.39x both ways), so full float32 precision does not split
    (:func:`whole_by_default`: whole walks, or the sequential kernel). The copy of this module beside a model's
    weights has no chunked_bwd.py: sequential there."""
    if not v.is_cuda or not _chunked_available():
        return False
    return v.dtype in (torch.bfloat16, torch.float16) or (
        v.dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest")


def chunked_forward_by_default(v: torch.Tensor) -> bool:
    """Whether ``auto`` may take the chunk-parallel forward (where it also pays, ``chunked_fwd.worth_it``): on CUDA
    for 16-bit and float32 inputs. Its matrix products run in TF32 where :func:`chunked_by_default` holds and in
    tf32x3 for float32 at full precision (``chunked_fwd.FULL_PRECISION_DOT``), with float32's error; there it beat
    the sequential forward at B = 1 to 4 on an H200 (B = 1, L = 8192: 2.73 ms against 4.70; B = 4 10.41 against
    11.31; docs/bench/tf32x3-2026-11-28), where IEEE products had lost at B = 4 (13.49 against 11.51). Until then
    full precision took the sequential forward. float64 inputs keep the sequential forward."""
    return v.is_cuda and v.dtype in (torch.bfloat16, torch.float16, torch.float32)


def whole_by_default(v: torch.Tensor) -> bool:
    """Whether ``auto``, where :func:`chunked_by_default` does not hold, asks the chunk-parallel backward for no
    split (``SPLIT`` 0): on CUDA for float32 inputs at full-precision matrix products (the trainer's default). There
    the split's IEEE corrections lose to the sequential kernel (B = 1, L = 8192: 28.17 ms forward + backward against
    22.30), but the Gluon local pass walking each sequence whole needs no corrections and wins (19.22; at B = 4 55.78
    against 60.94; docs/bench/whole-2026-11-28, call 6); where the Gluon pass cannot run, the sequential kernel runs as
    before."""
    return (v.is_cuda and v.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest"
            and _chunked_available())


def _chunked_forward_pays(v: torch.Tensor, cu_seqlens: torch.Tensor | None, chunk_size: int) -> bool:
    from . import chunked_fwd  # in this form: see _forward

    block_v = min(ONE_WARP_FWD_CONFIG["BV"], triton.next_power_of_2(v.shape[3]))
    return chunked_fwd.worth_it(_n_states(v.shape[0], cu_seqlens), v.shape[2], v.shape[3], v.shape[1], chunk_size,
                                block_v, v.device)


def _state_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _n_states(batch: int, cu_seqlens: torch.Tensor | None) -> int:
    """The number of sequences: the batch, or the packed sequences of ``cu_seqlens``."""
    return batch if cu_seqlens is None else cu_seqlens.numel() - 1


def _chunk_counts(cu_seqlens: torch.Tensor, chunk: int) -> torch.Tensor:
    return (cu_seqlens[1:] - cu_seqlens[:-1] + chunk - 1) // chunk


def _first_checkpoints(cu_seqlens: torch.Tensor | None, chunk: int) -> torch.Tensor | None:
    """Index of every packed sequence's first checkpoint (None without packing), computed on the device."""
    if cu_seqlens is None:
        return None
    counts = _chunk_counts(cu_seqlens, chunk)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]]).to(torch.int32)


def _output_shapes(v: torch.Tensor, k: torch.Tensor, cu_seqlens: torch.Tensor | None, n_chunks, store_checkpoints):
    """Shapes of the final states ``(M_T, I_T)`` and of the checkpoints (a 1-element stub when none are stored)."""
    heads, head_dim, state_size = v.shape[2], v.shape[3], k.shape[3]
    final = (_n_states(v.shape[0], cu_seqlens), heads, head_dim, state_size)
    return final, (n_chunks, heads, head_dim, state_size) if store_checkpoints else (1,)


def _chunk_offsets(cu_seqlens: torch.Tensor | None, batch: int, length: int, chunk: int):
    """Index of every sequence's first checkpoint and the number of checkpoints in all (one host sync)."""
    if cu_seqlens is None:
        return None, batch * triton.cdiv(length, chunk)
    return _first_checkpoints(cu_seqlens, chunk), int(_chunk_counts(cu_seqlens, chunk).sum())


def _forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, output_final_state, output_uncertainty,
             store_checkpoints, fwd_config, chunk_size):
    """Launch the forward kernel: ``y, M_T, I_T, u`` (None where not asked for) and the checkpoints.

    ``fwd_config = {"kernel": "gluon"}`` launches the Gluon forward instead (``gluon_scan.gluon_forward``; a
    ``"variant"`` key names one of ``gluon_scan.FWD_VARIANTS``): same outputs and checkpoint layout, so the backward
    below runs on them unchanged."""
    if fwd_config.get("kernel") == "chunked":
        from . import chunked_fwd  # in this form: see below

        return chunked_fwd.chunked_forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens,
                                           output_final_state, output_uncertainty, store_checkpoints, fwd_config,
                                           chunk_size)
    if fwd_config.get("kernel") == "gluon":
        # `from . import` rather than `from .gluon_scan import`: transformers copies every module a remote-code file
        # names in the second form, and the copy of this module beside a model's weights carries no Gluon
        from . import gluon_scan

        return gluon_scan.gluon_forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens,
                                        output_final_state, output_uncertainty, store_checkpoints, chunk_size,
                                        fwd_config.get("variant"))
    state_dtype = _state_dtype(v.dtype)
    offsets, n_chunks = _chunk_offsets(cu_seqlens, v.shape[0], v.shape[1], chunk_size)
    _, ck_shape = _output_shapes(v, k, cu_seqlens, n_chunks, store_checkpoints)
    ck_m = torch.empty(ck_shape, dtype=state_dtype, device=v.device)
    ck_i = torch.empty(ck_shape, dtype=state_dtype, device=v.device)
    y, m_t, i_t, u = _walk(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, offsets, n_chunks, ck_m,
                           ck_i, output_final_state, output_uncertainty, store_checkpoints, fwd_config, chunk_size)
    return y, m_t, i_t, u, ck_m, ck_i


def _walk(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, offsets, n_chunks, ck_m, ck_i,
          output_final_state, output_uncertainty, store_checkpoints, fwd_config, chunk_size, chunks=None):
    """Launch ``palimpsa_fwd_kernel`` with the tiling of ``fwd_config``: ``y, M_T, I_T, u`` (None where not asked
    for). Over whole sequences, storing the checkpoints if ``store_checkpoints``; with ``chunks`` (the most chunks
    of a sequence) one program per chunk, each from its checkpoint, which must be written already
    (``chunked_fwd.py``)."""
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    n_states = _n_states(batch, cu_seqlens)
    device, state_dtype = v.device, _state_dtype(v.dtype)
    ip = _prior_tensor(importance_prior, state_dtype, device)
    y = _output(v.shape, v.dtype, device)
    u = _output(v.shape, v.dtype, device) if output_uncertainty else None
    final_shape, _ = _output_shapes(v, k, cu_seqlens, n_chunks, False)
    m_t = _output(final_shape, state_dtype, device) if output_final_state else None
    i_t = _output(final_shape, state_dtype, device) if output_final_state else None
    block_v, cfg = _launch_config({"UNROLL": 1, **fwd_config}, head_dim)
    k, q = _float32_keys(k, q, bool(cfg.pop("KQ32", False)))
    scatter = _scatters(cfg, block_v, triton.next_power_of_2(state_size), v)
    cfg.pop("SCATTER", None)
    cfg["RESCALE"] = _rescales(cfg, chunks is not None)
    cfg["FAST_EXP"] = _fast_exp(v, cfg)
    grid = (triton.cdiv(head_dim, block_v), n_states * heads) + (() if chunks is None else (chunks,))
    palimpsa_fwd_kernel[grid](
        v, k, q, log_decay, beta, m0, i0, ip, y, u, ck_m, ck_i, m_t, i_t, cu_seqlens, offsets, length,
        H=heads, G=groups, P=head_dim, N=state_size, BV=block_v, BK=triton.next_power_of_2(state_size), CT=chunk_size,
        USE_BETA=beta is not None, USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None,
        STORE_FINAL_STATE=output_final_state, STORE_CHECKPOINTS=store_checkpoints and chunks is None,
        USE_UNCERTAINTY=output_uncertainty, IS_VARLEN=cu_seqlens is not None,
        FAST_RCP=_fast_rcp(ip), ACC=_acc_dtype(v.dtype), CHUNKED=chunks is not None,
        SCATTER=scatter, **cfg, **FP_FUSION,
    )
    return y, m_t, i_t, u


def _incoming_gradients(ck_m, n_states, dm_t, di_t, dy, du):
    """The output gradients a backward launch reads, contiguous: whether a final-state gradient came in (then
    both ``dM_T`` and ``dI_T``, zeros for the absent one), ``dy`` and ``du`` (or None)."""
    use_final_grad = dm_t is not None or di_t is not None
    if use_final_grad:
        dm_t = torch.zeros_like(ck_m[:1].expand(n_states, -1, -1, -1)) if dm_t is None else dm_t
        di_t = torch.zeros_like(dm_t) if di_t is None else di_t
        dm_t, di_t = dm_t.contiguous(), di_t.contiguous()
    return use_final_grad, dm_t, di_t, dy.contiguous(), None if du is None else du.contiguous()


def _gradient_buffers(v, k, q, log_decay, beta, m0, i0) -> tuple:
    """Where a backward launch writes the gradients of ``v, k, q, log_decay, beta, M0, I0`` (None where absent):
    ``dv``, ``dbeta`` in the input dtype; ``dk``, ``dq``, ``dlog_decay`` zeroed in the state dtype (programs add
    to them atomically); ``dM0``, ``dI0`` in the state dtype."""
    device, state_dtype = v.device, _state_dtype(v.dtype)
    return (_output(v.shape, v.dtype, device), torch.zeros(k.shape, dtype=state_dtype, device=device),
            torch.zeros(q.shape, dtype=state_dtype, device=device),
            torch.zeros(log_decay.shape, dtype=state_dtype, device=device),
            None if beta is None else _output(beta.shape, beta.dtype, device),
            None if m0 is None else _output(m0.shape, state_dtype, device),
            None if i0 is None else _output(i0.shape, state_dtype, device))


def _input_gradients(buffers: tuple, k, q, log_decay, m0, i0) -> tuple:
    """The buffers of :func:`_gradient_buffers` after the launch, each in its input's dtype."""
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    return (dv, dk.to(k.dtype), dq.to(q.dtype), dg.to(log_decay.dtype), dbeta,
            None if dm0 is None else dm0.to(m0.dtype), None if di0 is None else di0.to(i0.dtype))


def _backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t, di_t, du, bwd_config,
              chunk_size, block_size):
    """Launch the backward kernel: the gradients of ``v, k, q, log_decay, beta, M0, I0`` (None where absent).

    ``bwd_config = {"kernel": "gluon"}`` launches the Gluon backward instead (``gluon_scan.gluon_backward``; a
    ``"variant"`` key names one of ``gluon_scan.BWD_VARIANTS``)."""
    if bwd_config.get("kernel") == "chunked":
        from . import chunked_bwd  # in this form: see _forward

        return chunked_bwd.chunked_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t,
                                            di_t, du, bwd_config, chunk_size, block_size)
    if bwd_config.get("kernel") == "gluon":
        from . import gluon_scan  # in this form: see _forward

        return gluon_scan.gluon_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t,
                                         di_t, du, chunk_size, bwd_config.get("variant"))
    batch, length, heads, head_dim = v.shape
    n_states = _n_states(batch, cu_seqlens)
    offsets = _first_checkpoints(cu_seqlens, chunk_size)
    groups, state_size = k.shape[2], k.shape[3]
    device, state_dtype = v.device, _state_dtype(v.dtype)
    block_v, cfg = _launch_config(bwd_config, head_dim)
    k_l, q_l = _float32_keys(k, q, bool(cfg.pop("KQ32", False)))
    cfg["PREFETCH"] = _prefetches(v, cfg)
    block_k = triton.next_power_of_2(state_size)
    cfg["PAIRSUM"] = _pair_sums(v, beta, cfg, block_k)
    cfg["CHAIN"] = _chains(cfg, block_v, block_k, _compiled(v))
    cfg["FAST_EXP"] = _fast_exp(v, cfg)
    cfg["RESCALE"] = _rescales(cfg, False)
    n_blocks_v = triton.cdiv(head_dim, block_v)
    grid = (n_blocks_v, n_states * heads)
    use_final_grad, dm_t, di_t, dy, du = _incoming_gradients(ck_m, n_states, dm_t, di_t, dy, du)
    scratch = (grid[0] * grid[1] * slab_states(chunk_size, block_size, from_checkpoint=False), block_v, state_size)
    sc_m = torch.empty(scratch, dtype=state_dtype, device=device)
    sc_i = torch.empty(scratch, dtype=state_dtype, device=device)
    buffers = _gradient_buffers(v, k, q, log_decay, beta, m0, i0)
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    palimpsa_bwd_kernel[grid](
        v, k_l, q_l, log_decay, beta, m0, i0, ip, ck_m, ck_i, dy, du, dm_t, di_t, sc_m, sc_i,
        dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets, length,
        H=heads, G=groups, P=head_dim, N=state_size, BV=block_v, BK=block_k, CT=chunk_size, BS=block_size,
        USE_BETA=beta is not None, USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None,
        USE_FINAL_STATE_GRADIENT=use_final_grad,
        USE_DU=du is not None, IS_VARLEN=cu_seqlens is not None, FAST_RCP=_fast_rcp(ip),
        ACC=_acc_dtype(v.dtype), **cfg, **FP_FUSION,
    )
    return _input_gradients(buffers, k, q, log_decay, m0, i0)


# The scan as one operator of the dispatcher (``torch.ops.palimpsa.triton_scan_forward``), so that selective
# activation checkpointing can keep its outputs instead of running it again (``SAVE_UNDER_CHECKPOINTING``).
# Absent outputs are empty tensors (an operator returns tensors only); configurations travel as JSON.
@torch.library.custom_op(f"{OPS_NAMESPACE}::triton_scan_forward", mutates_args=())
def _scan_op(
    v: torch.Tensor, k: torch.Tensor, q: torch.Tensor, log_decay: torch.Tensor, beta: torch.Tensor | None,
    m0: torch.Tensor | None, i0: torch.Tensor | None, cu_seqlens: torch.Tensor | None, importance_prior: float,
    output_final_state: bool, output_uncertainty: bool, store_checkpoints: bool, fwd_config: str, bwd_config: str,
    chunk_size: int, block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    with on_device(v):
        outputs = _forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, output_final_state,
                           output_uncertainty, store_checkpoints, json.loads(fwd_config), chunk_size)
    return tuple(v.new_empty(0) if t is None else t for t in outputs)


def _scan_op_setup(ctx, inputs, output):
    (v, k, q, log_decay, beta, m0, i0, cu_seqlens, importance_prior, _, _, store_checkpoints, _, bwd_config,
     chunk_size, block_size) = inputs
    if store_checkpoints:
        ctx.save_for_backward(v, k, q, log_decay, beta, m0, i0, cu_seqlens, output[4], output[5])
    ctx.settings = (store_checkpoints, importance_prior, bwd_config, chunk_size, block_size)
    # the checkpoints get no gradient, and an output no loss used gets None rather than a tensor of zeros
    # (zeros for the checkpoints would double their memory in the backward)
    ctx.mark_non_differentiable(output[4], output[5])
    ctx.set_materialize_grads(False)


def _scan_op_backward(ctx, dy, dm_t, di_t, du, _dck_m, _dck_i):
    store_checkpoints, importance_prior, bwd_config, chunk_size, block_size = ctx.settings
    if not store_checkpoints:
        raise RuntimeError("the Palimpsa scan ran without checkpoints (no input needed a gradient when it ran)")
    v, k, q, log_decay, beta, m0, i0, cu_seqlens, ck_m, ck_i = ctx.saved_tensors
    dy = torch.zeros_like(v) if dy is None else dy
    present = [None if t is None or t.numel() == 0 else t for t in (dm_t, di_t, du)]
    grads = _ops().triton_scan_backward(v, k, q, log_decay, beta, m0, i0, cu_seqlens, ck_m, ck_i, dy, *present,
                                        importance_prior, bwd_config, chunk_size, block_size)
    dv, dk, dq, dlog_decay, dbeta, dm0, di0 = grads
    return (dv, dk, dq, dlog_decay, None if beta is None else dbeta, None if m0 is None else dm0,
            None if i0 is None else di0, *([None] * 9))


@torch.library.custom_op(f"{OPS_NAMESPACE}::triton_scan_backward", mutates_args=())
def _scan_backward_op(
    v: torch.Tensor, k: torch.Tensor, q: torch.Tensor, log_decay: torch.Tensor, beta: torch.Tensor | None,
    m0: torch.Tensor | None, i0: torch.Tensor | None, cu_seqlens: torch.Tensor | None, ck_m: torch.Tensor,
    ck_i: torch.Tensor, dy: torch.Tensor, dm_t: torch.Tensor | None, di_t: torch.Tensor | None,
    du: torch.Tensor | None, importance_prior: float, bwd_config: str, chunk_size: int, block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of ``v, k, q, log_decay, beta, M0, I0`` (empty tensors for the absent inputs)."""
    ip = _prior_tensor(importance_prior, ck_m.dtype, v.device)
    with on_device(v):
        grads = _backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t, di_t, du,
                          json.loads(bwd_config), chunk_size, block_size)
    return tuple(v.new_empty(0) if g is None else g for g in grads)


@_scan_backward_op.register_fake
def _scan_backward_op_fake(v, k, q, log_decay, beta, m0, i0, cu_seqlens, ck_m, ck_i, dy, dm_t, di_t, du,
                           importance_prior, bwd_config, chunk_size, block_size):
    return tuple(v.new_empty(0) if t is None else torch.empty_like(t) for t in (v, k, q, log_decay, beta, m0, i0))


_scan_op.register_autograd(_scan_op_backward, setup_context=_scan_op_setup)


@_scan_op.register_fake
def _scan_op_fake(v, k, q, log_decay, beta, m0, i0, cu_seqlens, importance_prior, output_final_state,
                  output_uncertainty, store_checkpoints, fwd_config, bwd_config, chunk_size, block_size):
    """The outputs' shapes and dtypes without running anything (for torch.compile and fake tensors); the number
    of checkpoints of packed sequences depends on ``cu_seqlens``' values, so it is a dynamic size there."""
    batch, length = v.shape[:2]
    packed = cu_seqlens is not None and store_checkpoints
    n_chunks = torch.library.get_ctx().new_dynamic_size() if packed else batch * triton.cdiv(length, chunk_size)
    final_shape, ck_shape = _output_shapes(v, k, cu_seqlens, n_chunks, store_checkpoints)
    state_dtype = _state_dtype(v.dtype)
    m_t = v.new_empty(final_shape, dtype=state_dtype) if output_final_state else v.new_empty(0)
    i_t = v.new_empty(final_shape, dtype=state_dtype) if output_final_state else v.new_empty(0)
    u = torch.empty_like(v) if output_uncertainty else v.new_empty(0)
    ck_m, ck_i = (v.new_empty(ck_shape, dtype=state_dtype) for _ in range(2))
    return torch.empty_like(v), m_t, i_t, u, ck_m, ck_i


# What selective activation checkpointing should keep rather than recompute (see palimpsa.upgrade.modeling).
SAVE_UNDER_CHECKPOINTING = (_ops().triton_scan_forward.default,)


def fused_recurrent_palimpsa_scan(
    v: torch.Tensor,
    k: torch.Tensor,
    q: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor | None,
    importance_prior: float,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None,
    output_final_state: bool,
    output_uncertainty: bool,
    cu_seqlens: torch.Tensor | None = None,
    *,
    fwd_config: dict | None = None,
    bwd_config: dict | None = None,
    chunk_size: int | None = None,
    block_size: int | None = None,
):
    """Triton Palimpsa scan with its backward; the inputs are checked by ``palimpsa_scan``.

    Args:
        v: ``[B, T, H, P]`` values; ``beta`` (or None) has the same shape.
        k, q: ``[B, T, G, N]`` keys and queries, shared by the ``H / G`` heads of a group.
        log_decay: ``[B, T, H]``.
        importance_prior: ``I_prior > 0``.
        initial_state: ``(M0, I0)`` each ``[S, H, P, N]`` (``S = B``, or the number of sequences with
            ``cu_seqlens``), or None for ``(0, I_prior)``; ``I0 = None`` means ``I_prior``.
        output_final_state, output_uncertainty: what to return besides ``y``.
        cu_seqlens: ``[S + 1]`` bounds of the packed sequences (``B = 1``), or None.
        fwd_config, bwd_config: ``BV`` (channels per program), ``TRANS`` (tile ``[BK, BV]`` rather than
            ``[BV, BK]``), ``num_warps``, and for the forward ``UNROLL`` (1 or 2 tokens per loop iteration,
            the next ones' inputs prefetched); ``fwd_config={"kernel": "gluon"}`` runs the Gluon forward
            (``bwd_config={"kernel": "gluon"}`` the Gluon backward), ``{"kernel": "chunked"}`` the chunk-parallel
            forward (``bwd_config={"kernel": "chunked"}`` the chunk-parallel backward), except for a one-token
            call. None: as ``PALIMPSA_TRITON_FORWARD`` and ``PALIMPSA_TRITON_BACKWARD`` choose (``auto``).
        chunk_size: tokens per checkpoint ``CT``; block_size: tokens per scratch state ``BS`` (divides ``CT``,
            even); None: the module's ``CHUNK_SIZE`` and ``BLOCK_SIZE``.

    Returns:
        ``y`` in ``v``'s dtype, ``(M_T, I_T)`` (float32, float64 for float64 inputs) or None, the uncertainty
        in ``v``'s dtype or None.
    """
    chunk_size = CHUNK_SIZE if chunk_size is None else chunk_size
    block_size = BLOCK_SIZE if block_size is None else block_size
    backward = os.environ.get(BACKWARD_ENV) or "auto"
    if backward not in BACKWARDS:
        raise ValueError(f"{BACKWARD_ENV} must be one of {', '.join(BACKWARDS)}, got {backward!r}")
    if bwd_config is None and (backward == "chunked" or (backward == "auto" and chunked_by_default(v))):
        bwd_config = {"kernel": "chunked"}
    elif bwd_config is None and backward == "auto" and whole_by_default(v):
        bwd_config = {"kernel": "chunked", "SPLIT": 0}
    if bwd_config is None or (v.shape[1] == 1 and bwd_config.get("kernel") == "gluon"):
        bwd_config = _backward_config(_n_states(v.shape[0], cu_seqlens), v.shape[2], v.shape[3], v.device)
    if chunk_size % block_size or block_size % 2:
        raise ValueError(f"block_size ({block_size}) must be even and divide chunk_size ({chunk_size})")
    # one token (a decoding step) runs the Triton kernels even where the Gluon ones are asked for: Triton
    # specialises a length of 1 into the kernel, and Triton 3.6's LLVM lowering of the Gluon forward so
    # specialised aborts the process (docs/kernels.md)
    forward = os.environ.get(FORWARD_ENV) or "auto"
    if forward not in FORWARDS:
        raise ValueError(f"{FORWARD_ENV} must be one of {', '.join(FORWARDS)}, got {forward!r}")
    if fwd_config is None:
        fwd_config = default_forward_config(v, cu_seqlens, chunk_size, forward)
    elif v.shape[1] == 1 and fwd_config.get("kernel") in ("gluon", "chunked"):
        fwd_config = _forward_config(_n_states(v.shape[0], cu_seqlens), v.shape[2], v.shape[3], v.device)
    if fwd_config.get("UNROLL", 1) not in (1, 2):
        raise ValueError(f"the forward's UNROLL must be 1 or 2, got {fwd_config['UNROLL']}")
    m0, i0 = (None, None) if initial_state is None else initial_state
    if cu_seqlens is not None:
        cu_seqlens = cu_seqlens.to(device=v.device, dtype=torch.int32)
    # contiguous once here: the operator saves its inputs for the backward as they come
    v, k, q, log_decay, beta, m0, i0 = (None if t is None else t.contiguous() for t in (v, k, q, log_decay, beta,
                                                                                        m0, i0))
    store_checkpoints = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (v, k, q, log_decay, beta, m0, i0))
    y, m_t, i_t, u, _, _ = _ops().triton_scan_forward(
        v, k, q, log_decay, beta, m0, i0, cu_seqlens, float(importance_prior), output_final_state,
        output_uncertainty, store_checkpoints, json.dumps(fwd_config), json.dumps(bwd_config),
        chunk_size, block_size,
    )
    return y, (m_t, i_t) if output_final_state else None, u if output_uncertainty else None


def fused_recurrent_palimpsa_step(v, k, q, log_decay, beta, state, importance_prior, output_uncertainty):
    """Decoding step on CUDA; see :func:`palimpsa.kernels.palimpsa_step`."""
    memory, importance = state
    batch, heads, head_dim = v.shape
    groups, state_size = k.shape[1], k.shape[2]
    v, k, q, log_decay = (t.contiguous() for t in (v, k, q, log_decay))
    beta = None if beta is None else beta.contiguous()
    ip = _prior_tensor(float(importance_prior), memory.dtype, v.device)
    y = _output(v.shape, v.dtype, v.device)
    u = _output(v.shape, v.dtype, v.device) if output_uncertainty else None
    block_v, cfg = _launch_config(STEP_CONFIG, head_dim)
    grid = (triton.cdiv(head_dim, block_v), batch * heads)
    with on_device(v):
        palimpsa_step_kernel[grid](
            v, k, q, log_decay, beta, ip, memory, importance, y, u,
            H=heads, G=groups, P=head_dim, N=state_size, BV=block_v, BK=triton.next_power_of_2(state_size),
            USE_BETA=beta is not None, USE_UNCERTAINTY=output_uncertainty, FAST_RCP=_fast_rcp(memory),
            ACC=_acc_dtype(memory.dtype), **cfg, **FP_FUSION,
        )
    return y, u
