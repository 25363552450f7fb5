"""Gluon kernels of the Palimpsa scan for Hopper-class GPUs: rescaled states, pair-shared reciprocals, readout
and row sums inside a warp; a forward, and a backward that is opt-in until it is faster than Triton's.

The algorithm is the one ``kernels/emulation.py`` proves against the sequential reference (read its docstring
first): per head keep ``M' = e M`` and ``J' = e (I - I_prior)``, so that between renormalisations a token costs
one FFMA per state for each of ``M'`` and ``J'``, one add for ``D = J' + e I_prior``, a reciprocal (on half of the
states one per pair: ``1 / D1 = D2 / (D1 D2)``) and two for the readout ``y = sum_N (M' / D) q``.

Mapping (Gluon: the layouts are explicit, which plain Triton does not allow), one of ``FWD_VARIANTS``
(:class:`FwdVariant`; the GPU sweep picks, ``FWD_VARIANT_BY_ROWS`` records its choice). A warp owns ``CPT LV``
channels of one head; a thread owns ``CPT`` channels x ``N LV / 32`` states, the ``N`` states of a channel spread
over ``32 / LV`` lanes. The states are four register tiles ``[BV, N / 4]`` (tile ``t``, column ``j``: state
``n = 4 w (j // w) + t w + j % w``, ``w = N LV / 128``), so a thread's states of one tile are ``w`` consecutive
ones (one vector load of ``k``) and tiles 0 and 1 are the pairs that share a reciprocal. The readout sums a
thread's states in registers, then over the ``32 / LV`` lanes with shuffles: no shared memory and no barrier per
token. ``k``, ``k^2`` (unless the variant squares ``k`` itself) and ``q`` come in float32 from a prologue
(PyTorch, once per call, shared by every head of a group, packed ``[B, T, G, 3 or 2, N]`` so that one address
serves all of a token's vector loads), so the inner loop converts nothing. ``U`` tokens per loop iteration: the
scalar walk of their scales first, then one warp-uniform branch, so that when none of them renormalises (nearly
always on slow heads) the ``U`` tokens are one basic block whose reciprocals, shuffles and stores the compiler
overlaps with the next token's update; each token's inputs are loaded ``U`` tokens ahead.

The checkpoints (every ``CT`` tokens, the true ``(M, I)``) and final states have the Triton path's layout, so
``fused_recurrent``'s backward runs on them unchanged, and the Gluon backward runs on the Triton forward's as well.
The backward's own mapping and schedule are described above its kernel.

**Version shim.** Everything Triton-version-dependent is in the block below: where ``GluonASTSource`` lives
(exported from 3.9, private before) and whether Gluon is there at all. The kernel uses only the Gluon subset
that is the same from 3.5 to 3.9 (``BlockedLayout`` with its four positional arguments, ``SliceLayout``,
``arange``/``load``/``store``/``sum``/``where``/``exp``/``inline_asm_elementwise``, scalar ``if``).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import NamedTuple

import torch
import triton

from .emulation import TAU  # the algorithm's renormalisation threshold: one value for kernel and emulation
from .fused_recurrent import FP_FUSION  # FMA contraction asked for explicitly, as every launch here does

# --- version shim: the one place that knows where Gluon's pieces live in each Triton version ---------------
try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    try:
        from triton.experimental.gluon import GluonASTSource  # Triton >= 3.9
    except ImportError:
        from triton.experimental.gluon._runtime import GluonASTSource  # Triton 3.5 - 3.8
    GLUON_IMPORT_ERROR = None
except ImportError as error:  # Triton < 3.5, or a build without Gluon: the Triton path is used instead
    gluon = gl = GluonASTSource = None
    GLUON_IMPORT_ERROR = f"{type(error).__name__}: {error}"
# ------------------------------------------------------------------------------------------------------------

class BwdVariant(NamedTuple):
    """One mapping of the backward (``palimpsa_gluon_bwd_kernel``): ``CPT`` channels per thread over 2 lanes (the
    other 16 lanes split the ``N`` states), ``NW`` warps per program, so a program owns ``BV = 2 CPT NW``
    channels. With ``NW > 1`` the sums of ``dk``, ``dq`` and the decay gradient over a program's channels cross
    the warps inside the kernel (Gluon reduces through shared memory, a barrier per token) before the atomics:
    ``NW`` times fewer atomics per token. ``PROBE`` (timing only, wrong gradients): 1 leaves out the ``dk``,
    ``dq`` atomics, to measure what they cost. ``BLOCK4``: every 4-token group whose tokens are none of them a
    reference (the common case: one group in 64 holds a chunk's last token) runs branch-free, its recompute
    updates and reverse steps one basic block, so that ptxas can issue the group's loads together instead of
    waiting on each token's in turn (the same operations on the same values as the general path). ``MAXNREG``: a
    register cap (more warps resident per SM: at 200, B = 1's 1280 one-warp programs of ``b2w1`` fit one wave on
    an H100)."""

    CPT: int
    NW: int
    PROBE: int = 0
    BLOCK4: int = 0
    MAXNREG: int = 0

    def block_v(self) -> int:
        return 2 * self.CPT * self.NW


BWD_VARIANTS = {
    "b2w1": BwdVariant(2, 1),  # the first H100 run's mapping
    "b2w2": BwdVariant(2, 2),
    "b2w4": BwdVariant(2, 4),
    "b1w1": BwdVariant(1, 1),
    "b1w4": BwdVariant(1, 4),
    "b2w1-probe-no-dkdq-atomics": BwdVariant(2, 1, 1),
    "b1w1g": BwdVariant(1, 1, BLOCK4=1),
    "b2w1g": BwdVariant(2, 1, BLOCK4=1),
    "b2w1gr200": BwdVariant(2, 1, BLOCK4=1, MAXNREG=200),
    "b2w1r200": BwdVariant(2, 1, MAXNREG=200),
}
# as FWD_VARIANT_BY_ROWS (the H100 sweep of 2026-11-24, B = 1, L = 8192: b2w1g 36.1 ms, b2w1 41.4, b1w1 42.0)
BWD_VARIANT_BY_ROWS = ((None, "b2w1g"),)
BWD_VARIANT_ENV = "PALIMPSA_GLUON_BWD_VARIANT"


def backward_variant(rows: int, head_dim: int) -> str:
    """The backward's variant for ``rows = S H`` rows: the environment's, else the table's (``b1w1`` where ``P``
    does not divide by its channels)."""
    name = os.environ.get(BWD_VARIANT_ENV)
    if name:
        if name not in BWD_VARIANTS:
            raise ValueError(f"{BWD_VARIANT_ENV} must be one of {sorted(BWD_VARIANTS)}, got {name!r}")
        return name
    name = next(name for bound, name in BWD_VARIANT_BY_ROWS if bound is None or rows <= bound)
    return name if head_dim % BWD_VARIANTS[name].block_v() == 0 else "b1w1"


class FwdVariant(NamedTuple):
    """One mapping of the forward (``palimpsa_gluon_fwd_kernel``'s constexprs), swept on the GPU by
    ``scripts/sweep_gluon_scan.py``.

    ``CPT`` channels per thread, ``LV`` lanes along the channels (the other ``32 / LV`` lanes split the ``N`` states
    of a channel: ``log2(32 / LV)`` shuffles per channel and readout), ``NW`` warps per program (channel blocks of
    one head stacked), so a program owns ``BV = CPT LV NW`` channels and a thread ``CPT N LV / 32`` state elements.
    ``U`` tokens per loop iteration, in one basic block when none of them renormalises (one warp-uniform branch per
    ``U`` tokens instead of per token, so that the compiler overlaps a token's reciprocals, shuffles and store with
    the next one's update), each token's inputs loaded ``U`` tokens ahead. ``SQK``: ``k^2`` computed in the kernel
    (one multiply per state and thread) instead of loaded (a third fewer input registers and loads). ``MAXNREG``:
    ptxas's register cap (0: none)."""

    CPT: int
    LV: int
    NW: int
    U: int
    SQK: bool = False
    MAXNREG: int = 0

    def block_v(self) -> int:
        return self.CPT * self.LV * self.NW

    def elements(self, state_size: int) -> int:
        """State elements a thread owns: ``CPT`` channels x ``N LV / 32`` states."""
        return self.CPT * state_size * self.LV // 32

    def unsupported(self, head_dim: int, state_size: int) -> str | None:
        if self.U not in (1, 2, 4) or self.CPT not in (1, 2) or self.LV not in (1, 2, 4, 8, 16, 32):
            return f"no kernel for U = {self.U}, CPT = {self.CPT}, LV = {self.LV}"
        if head_dim % self.block_v():
            return f"P = {head_dim} is not a multiple of {self.block_v()} channels per program"
        if state_size < 32 or state_size & (state_size - 1):
            return f"N = {state_size} is not a power of two >= 32"
        if state_size < 4 * (32 // self.LV):
            return f"N = {state_size} is under 4 tiles x {32 // self.LV} lanes"
        return None


# The forward's mappings. ``c2l4u1`` is the first H100 run's (2 channels x N / 8 states per thread, a branch per
# token); the rest trade registers (resident warps, balance over the SMs' schedulers at B = 1) against the
# per-token work shared by a thread's elements (loads, the scale, shuffles). Names: c<CPT> l<LV> u<U> [w<NW>] [s:
# SQK] [r<MAXNREG>].
FWD_VARIANTS = {
    "c2l4u1": FwdVariant(2, 4, 1, 1),
    "c2l4u2": FwdVariant(2, 4, 1, 2),
    "c2l4u2s": FwdVariant(2, 4, 1, 2, True),
    "c1l4u2": FwdVariant(1, 4, 1, 2),
    "c1l4u4s": FwdVariant(1, 4, 1, 4, True),
    "c2l2u2": FwdVariant(2, 2, 1, 2),
    "c2l2u2s": FwdVariant(2, 2, 1, 2, True),
    "c2l2u4s": FwdVariant(2, 2, 1, 4, True),
    "c1l2u2": FwdVariant(1, 2, 1, 2),
    "c1l2u4s": FwdVariant(1, 2, 1, 4, True),
}
# Which variant runs, by the number of (sequence, head) rows S H of the launch: the first entry whose bound is
# at least S H (None: any). Set from the sweep's table (docs/kernels.md); until a GPU run says otherwise, the
# first run's mapping. PALIMPSA_GLUON_FWD_VARIANT=<name> overrides it (the sweep uses that).
FWD_VARIANT_BY_ROWS = ((None, "c2l2u2s"),)  # the H100 sweep of 2026-11-24: fastest Gluon forward at B = 1 and 4
FWD_VARIANT_ENV = "PALIMPSA_GLUON_FWD_VARIANT"
FALLBACK_VARIANT = "c2l4u1"  # runs every shape supported() accepts


def forward_variant(rows: int, head_dim: int, state_size: int) -> str:
    """The name of the forward variant for a launch of ``rows = S H`` rows: the environment's, else the table's,
    else (where that one cannot map these shapes) ``FALLBACK_VARIANT``."""
    name = os.environ.get(FWD_VARIANT_ENV)
    if name:
        if name not in FWD_VARIANTS:
            raise ValueError(f"{FWD_VARIANT_ENV} must be one of {sorted(FWD_VARIANTS)}, got {name!r}")
        return name
    name = next(name for bound, name in FWD_VARIANT_BY_ROWS if bound is None or rows <= bound)
    if FWD_VARIANTS[name].unsupported(head_dim, state_size) is not None:
        return FALLBACK_VARIANT
    return name


def supported(v: torch.Tensor, k: torch.Tensor) -> str | None:
    """None where the Gluon forward can run these inputs, else why not (the caller falls back to Triton)."""
    if GLUON_IMPORT_ERROR is not None:
        return f"Gluon is not importable ({GLUON_IMPORT_ERROR})"
    if not v.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
        return "Gluon kernels need a GPU (no interpreter)"
    if torch.cuda.get_device_capability(v.device)[0] != 9:
        return "the Gluon forward is written and tuned for Hopper (sm_90)"
    if v.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"{v.dtype} inputs stay on the Triton path (float64 states)"
    head_dim, state_size = v.shape[3], k.shape[3]
    variant = FWD_VARIANTS[forward_variant(v.shape[0] * v.shape[2], head_dim, state_size)]
    return variant.unsupported(head_dim, state_size)


if gluon is not None:

    @gluon.jit
    def _rcp(x):
        """``1 / x`` as one ``rcp.approx.ftz.f32`` (1 ulp, one MUFU op; ``div.full.f32`` is 8 instructions)."""
        return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32,
                                         is_pure=True, pack=1)

    @gluon.jit
    def _load_token(v, kkq, g, beta, tok, i_h, i_g, o_v, o_n, W: gl.constexpr, H: gl.constexpr, G: gl.constexpr,
                    P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr, SQK: gl.constexpr):
        """Everything token ``tok`` needs: its log decay, the program's values and gains, and the four tiles'
        columns of ``k``, ``k^2`` (``k`` again when ``SQK``: the kernel squares it) and ``q``. Unmasked: callers
        clamp ``tok`` to the sequence, so a prefetch past its end rereads the last token instead of zero-filling
        its registers under a mask."""
        b_la = gl.load(g + tok * H + i_h).to(gl.float64)
        b_v = gl.load(v + (tok * H + i_h) * P + o_v).to(gl.float32)
        if USE_BETA:
            b_b = gl.load(beta + (tok * H + i_h) * P + o_v).to(gl.float32)
        else:
            b_b = b_v
        # kkq is [B, T, G, 3, N] (k, k^2, q), or [B, T, G, 2, N] (k, q) with SQK: one base for all the loads
        p_k = kkq + (tok * G + i_g) * ((2 if SQK else 3) * N) + o_n
        p_q = p_k + (1 if SQK else 2) * N
        k0, k1, k2, k3 = gl.load(p_k), gl.load(p_k + W), gl.load(p_k + 2 * W), gl.load(p_k + 3 * W)
        if SQK or not USE_BETA:
            s0, s1, s2, s3 = k0, k1, k2, k3
        else:
            p_s = p_k + N
            s0, s1, s2, s3 = gl.load(p_s), gl.load(p_s + W), gl.load(p_s + 2 * W), gl.load(p_s + 3 * W)
        return (b_la, b_v, b_b, k0, k1, k2, k3, s0, s1, s2, s3,
                gl.load(p_q), gl.load(p_q + W), gl.load(p_q + 2 * W), gl.load(p_q + 3 * W))

    @gluon.jit
    def _program(cu_seqlens, chunk_offsets, T, H: gl.constexpr, G: gl.constexpr, CT: gl.constexpr,
                 IS_VARLEN: gl.constexpr):
        """What a program owns (as ``fused_recurrent._program``): channel block ``i_v`` of (sequence, head) ``i_nh``,
        the head's group, the sequence's first token ``bos``, its length and its first checkpoint ``boc``."""
        i_v, i_nh = gl.program_id(0), gl.program_id(1)
        i_n, i_h = i_nh // H, i_nh % H
        if IS_VARLEN:
            bos = gl.load(cu_seqlens + i_n).to(gl.int64)
            T = (gl.load(cu_seqlens + i_n + 1).to(gl.int64) - bos).to(gl.int32)
            boc = gl.load(chunk_offsets + i_n).to(gl.int64)
        else:
            bos = i_n.to(gl.int64) * T
            boc = i_n.to(gl.int64) * gl.cdiv(T, CT)
        return i_v, i_nh, i_h, i_h // (H // G), bos, T, boc

    @gluon.jit
    def _scale(b_sc, b_la, t, T, CT: gl.constexpr, TAU_: gl.constexpr):
        """The scalar walk of token ``t`` (position in the sequence): its log-scale, the grown one before a reset,
        and whether it is a reference (the scale would pass e^TAU, a chunk's or the sequence's last token). A token
        past the sequence's end (the empty tail of the last group) does not grow the scale."""
        b_grown = b_sc - gl.where(t < T, b_la, 0.0)
        is_ref = (b_grown > TAU_) | (t % CT == CT - 1) | (t == T - 1)
        return gl.where(is_ref, 0.0, b_grown), b_grown, is_ref

    @gluon.jit
    def _token(st, b_sc, b_grown, is_ref, b_ip, x, y, u, tok, valid, i_h, o_v, H: gl.constexpr, P: gl.constexpr,
               USE_BETA: gl.constexpr, USE_UNCERTAINTY: gl.constexpr, RENORM: gl.constexpr, SQK: gl.constexpr):
        """Advance the rescaled states ``st = (M'_0..3, J'_0..3)`` by token ``tok`` (inputs ``x`` from
        ``_load_token``, scale from ``_scale``) and write its readout. ``RENORM``: the group holds a reference, so
        every token of it multiplies the states by its carry ``c`` (1 except at the reference: exact); otherwise
        ``c = 1`` and nothing is multiplied. An invalid token is the identity and writes nothing."""
        b_la, b_v, b_b, k0, k1, k2, k3, s0, s1, s2, s3, q0, q1, q2, q3 = x
        m0, m1, m2, m3, j0, j1, j2, j3 = st
        if RENORM:  # c = a_t / e_{t-1} at a reference
            b_c = gl.where(is_ref, gl.exp((-b_grown).to(gl.float32)), 1.0)
            m0, m1, m2, m3 = m0 * b_c, m1 * b_c, m2 * b_c, m3 * b_c
            j0, j1, j2, j3 = j0 * b_c, j1 * b_c, j2 * b_c, j3 * b_c
        b_e = gl.exp(b_sc.to(gl.float32))
        b_w = gl.where(valid, b_e, 0.0)  # the write's scale: 0 makes an invalid token the identity
        b_ev = gl.expand_dims(b_v * b_w, 1)
        m0 = m0 + b_ev * gl.expand_dims(k0, 0)
        m1 = m1 + b_ev * gl.expand_dims(k1, 0)
        m2 = m2 + b_ev * gl.expand_dims(k2, 0)
        m3 = m3 + b_ev * gl.expand_dims(k3, 0)
        if USE_BETA:
            if SQK:
                s0, s1, s2, s3 = k0 * k0, k1 * k1, k2 * k2, k3 * k3
            b_eb = gl.expand_dims(b_b * b_w, 1)
            j0 = j0 + b_eb * gl.expand_dims(s0, 0)
            j1 = j1 + b_eb * gl.expand_dims(s1, 0)
            j2 = j2 + b_eb * gl.expand_dims(s2, 0)
            j3 = j3 + b_eb * gl.expand_dims(s3, 0)
        b_ipe = b_ip * b_e
        b_d0, b_d1, b_d2, b_d3 = j0 + b_ipe, j1 + b_ipe, j2 + b_ipe, j3 + b_ipe
        b_rp = _rcp(b_d0 * b_d1)  # tiles 0 and 1 share one reciprocal per pair of states
        b_r0, b_r1 = b_d1 * b_rp, b_d0 * b_rp
        b_r2, b_r3 = _rcp(b_d2), _rcp(b_d3)
        b_acc = (m0 * b_r0) * gl.expand_dims(q0, 0) + (m1 * b_r1) * gl.expand_dims(q1, 0)
        b_acc += (m2 * b_r2) * gl.expand_dims(q2, 0) + (m3 * b_r3) * gl.expand_dims(q3, 0)
        o_y = (tok * H + i_h) * P + o_v
        m_y = o_v < gl.where(valid, P, 0)
        gl.store(y + o_y, gl.sum(b_acc, axis=1).to(y.dtype.element_ty), mask=m_y)
        if USE_UNCERTAINTY:  # u = sum_N q^2 / I = e sum_N q^2 / D
            b_uq = b_r0 * gl.expand_dims(q0 * q0, 0) + b_r1 * gl.expand_dims(q1 * q1, 0)
            b_uq += b_r2 * gl.expand_dims(q2 * q2, 0) + b_r3 * gl.expand_dims(q3 * q3, 0)
            gl.store(u + o_y, (gl.sum(b_uq, axis=1) * b_e).to(u.dtype.element_ty), mask=m_y)
        return (m0, m1, m2, m3, j0, j1, j2, j3)

    @gluon.jit
    def _tokens(st, sc1, gr1, rf1, sc2, gr2, rf2, sc3, gr3, rf3, sc4, gr4, rf4, x1, x2, x3, x4, b_ip, v, kkq, g, beta,
                y, u, tok, t, T, last, i_h, i_g, o_v, o_n, W: gl.constexpr, H: gl.constexpr, G: gl.constexpr,
                P: gl.constexpr, N: gl.constexpr, U: gl.constexpr, USE_BETA: gl.constexpr,
                USE_UNCERTAINTY: gl.constexpr, RENORM: gl.constexpr, SQK: gl.constexpr):
        """``_group``'s ``U`` token updates with their scales, each input reloaded for the token ``U`` further
        right after its use; ``RENORM`` as in ``_token`` (inlined: one basic block per value)."""
        st = _token(st, sc1, gr1, rf1, b_ip, x1, y, u, tok, t < T, i_h, o_v, H, P, USE_BETA, USE_UNCERTAINTY, RENORM,
                    SQK)
        x1 = _load_token(v, kkq, g, beta, gl.minimum(tok + U, last), i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA, SQK)
        if U >= 2:
            st = _token(st, sc2, gr2, rf2, b_ip, x2, y, u, tok + 1, t + 1 < T, i_h, o_v, H, P, USE_BETA,
                        USE_UNCERTAINTY, RENORM, SQK)
            x2 = _load_token(v, kkq, g, beta, gl.minimum(tok + U + 1, last), i_h, i_g, o_v, o_n, W, H, G, P, N,
                             USE_BETA, SQK)
        if U >= 4:
            st = _token(st, sc3, gr3, rf3, b_ip, x3, y, u, tok + 2, t + 2 < T, i_h, o_v, H, P, USE_BETA,
                        USE_UNCERTAINTY, RENORM, SQK)
            x3 = _load_token(v, kkq, g, beta, gl.minimum(tok + U + 2, last), i_h, i_g, o_v, o_n, W, H, G, P, N,
                             USE_BETA, SQK)
            st = _token(st, sc4, gr4, rf4, b_ip, x4, y, u, tok + 3, t + 3 < T, i_h, o_v, H, P, USE_BETA,
                        USE_UNCERTAINTY, RENORM, SQK)
            x4 = _load_token(v, kkq, g, beta, gl.minimum(tok + U + 3, last), i_h, i_g, o_v, o_n, W, H, G, P, N,
                             USE_BETA, SQK)
        return st, x1, x2, x3, x4

    @gluon.jit
    def _group(st, b_sc, x1, x2, x3, x4, b_ip, v, kkq, g, beta, y, u, tok, t, T, last, i_h, i_g, o_v, o_n,
               W: gl.constexpr, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr,
               CT: gl.constexpr, TAU_: gl.constexpr, U: gl.constexpr, USE_BETA: gl.constexpr,
               USE_UNCERTAINTY: gl.constexpr, SQK: gl.constexpr):
        """``U`` tokens from ``t`` in one basic block (``x1..xU`` their prefetched inputs; each is reloaded for
        the token ``U`` further right after its use). The scalar walk of all ``U`` runs first; where one of them
        is a reference the block multiplies by the carries (``_token``'s ``RENORM``), else not."""
        sc1, gr1, rf1 = _scale(b_sc, x1[0], t, T, CT, TAU_)
        b_sc, any_ref = sc1, rf1
        sc2, gr2, rf2 = sc1, gr1, rf1  # the tokens beyond U stand in for names _tokens never reads
        sc3, gr3, rf3 = sc1, gr1, rf1
        sc4, gr4, rf4 = sc1, gr1, rf1
        if U >= 2:
            sc2, gr2, rf2 = _scale(b_sc, x2[0], t + 1, T, CT, TAU_)
            b_sc, any_ref = sc2, any_ref | rf2
        if U >= 4:
            sc3, gr3, rf3 = _scale(b_sc, x3[0], t + 2, T, CT, TAU_)
            sc4, gr4, rf4 = _scale(sc3, x4[0], t + 3, T, CT, TAU_)
            b_sc, any_ref = sc4, any_ref | rf3 | rf4
        if any_ref:
            st, x1, x2, x3, x4 = _tokens(st, sc1, gr1, rf1, sc2, gr2, rf2, sc3, gr3, rf3, sc4, gr4, rf4, x1, x2, x3,
                                         x4, b_ip, v, kkq, g, beta, y, u, tok, t, T, last, i_h, i_g, o_v, o_n, W, H, G,
                                         P, N, U, USE_BETA, USE_UNCERTAINTY, True, SQK)
        else:
            st, x1, x2, x3, x4 = _tokens(st, sc1, gr1, rf1, sc2, gr2, rf2, sc3, gr3, rf3, sc4, gr4, rf4, x1, x2, x3,
                                         x4, b_ip, v, kkq, g, beta, y, u, tok, t, T, last, i_h, i_g, o_v, o_n, W, H, G,
                                         P, N, U, USE_BETA, USE_UNCERTAINTY, False, SQK)
        return st, b_sc, x1, x2, x3, x4

    @gluon.jit
    def _store_state(p_m, p_i, o_s0, st, b_ip, W: gl.constexpr):
        """Store a true state (``e = 1``): ``M = M'`` and ``I = J' + I_prior``."""
        m0, m1, m2, m3, j0, j1, j2, j3 = st
        gl.store(p_m + o_s0, m0)
        gl.store(p_m + o_s0 + W, m1)
        gl.store(p_m + o_s0 + 2 * W, m2)
        gl.store(p_m + o_s0 + 3 * W, m3)
        gl.store(p_i + o_s0, j0 + b_ip)
        gl.store(p_i + o_s0 + W, j1 + b_ip)
        gl.store(p_i + o_s0 + 2 * W, j2 + b_ip)
        gl.store(p_i + o_s0 + 3 * W, j3 + b_ip)

    @gluon.jit
    def palimpsa_gluon_fwd_kernel(
        v, kkq, g, beta, m0, i0, ip, y, u, ck_m, ck_i, mT, iT, cu_seqlens, chunk_offsets, T,
        H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr,
        CPT: gl.constexpr, LV: gl.constexpr, NW: gl.constexpr, U: gl.constexpr, SQK: gl.constexpr,
        USE_BETA: gl.constexpr, USE_INITIAL_STATE: gl.constexpr, USE_INITIAL_IMPORTANCE: gl.constexpr,
        STORE_FINAL_STATE: gl.constexpr, STORE_CHECKPOINTS: gl.constexpr, USE_UNCERTAINTY: gl.constexpr,
        IS_VARLEN: gl.constexpr,
    ):
        # a program: NW warps x LV lanes x CPT channels; the N states of a channel over the warp's other 32 / LV
        # lanes, as four tiles [BV, N / 4] of which a thread owns W consecutive columns each
        LN: gl.constexpr = 32 // LV
        W: gl.constexpr = N // (4 * LN)
        BV: gl.constexpr = CPT * LV * NW
        L: gl.constexpr = gl.BlockedLayout([CPT, W], [LV, LN], [NW, 1], [1, 0])
        LVS: gl.constexpr = gl.SliceLayout(1, L)
        LNS: gl.constexpr = gl.SliceLayout(0, L)

        i_v, i_nh, i_h, i_g, bos, T, boc = _program(cu_seqlens, chunk_offsets, T, H, G, CT, IS_VARLEN)
        o_v = i_v * BV + gl.arange(0, BV, layout=LVS)
        o_j = gl.arange(0, N // 4, layout=LNS)
        o_n = (o_j // W) * (4 * W) + o_j % W  # tile 0's state columns; tile t's are t * W further
        o_s0 = gl.expand_dims(gl.arange(0, BV, layout=LVS) * N, 1) + gl.expand_dims(o_n, 0)
        o_state = (i_nh.to(gl.int64) * P + i_v * BV) * N
        b_ip = gl.load(ip)

        zero = gl.zeros([BV, N // 4], gl.float32, L)
        b_m0, b_m1, b_m2, b_m3 = zero, zero, zero, zero
        b_j0, b_j1, b_j2, b_j3 = zero, zero, zero, zero
        if USE_INITIAL_STATE:
            b_m0 = gl.load(m0 + o_state + o_s0).to(gl.float32)
            b_m1 = gl.load(m0 + o_state + o_s0 + W).to(gl.float32)
            b_m2 = gl.load(m0 + o_state + o_s0 + 2 * W).to(gl.float32)
            b_m3 = gl.load(m0 + o_state + o_s0 + 3 * W).to(gl.float32)
        if USE_INITIAL_IMPORTANCE:  # J' = I0 - I_prior at the start (e = 1)
            b_j0 = gl.load(i0 + o_state + o_s0).to(gl.float32) - b_ip
            b_j1 = gl.load(i0 + o_state + o_s0 + W).to(gl.float32) - b_ip
            b_j2 = gl.load(i0 + o_state + o_s0 + 2 * W).to(gl.float32) - b_ip
            b_j3 = gl.load(i0 + o_state + o_s0 + 3 * W).to(gl.float32) - b_ip
        st = (b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3)

        # the log-scale S = log e per head, in float64: each e_t = exp(S_t) is rounded once, S never drifts
        b_sc = gl.to_tensor(0.0).to(gl.float64)
        last = bos + T - 1
        # U tokens per iteration, each one's inputs loaded U tokens ahead into its own registers
        x1 = _load_token(v, kkq, g, beta, bos, i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA, SQK)
        x2 = x1
        x3 = x1
        x4 = x1
        if U >= 2:
            x2 = _load_token(v, kkq, g, beta, gl.minimum(bos + 1, last), i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA,
                             SQK)
        if U >= 4:
            x3 = _load_token(v, kkq, g, beta, gl.minimum(bos + 2, last), i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA,
                             SQK)
            x4 = _load_token(v, kkq, g, beta, gl.minimum(bos + 3, last), i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA,
                             SQK)
        for i_c in range(gl.cdiv(T, CT)):
            if STORE_CHECKPOINTS:  # a chunk start follows a reference token: M' and J' are the true states
                o_ck = (((boc + i_c) * H + i_h) * P + i_v * BV) * N
                _store_state(ck_m + o_ck, ck_i + o_ck, o_s0, st, b_ip, W)
            # U divides CT, so only the sequence's last group can be partly empty
            for t in range(i_c * CT, gl.minimum(i_c * CT + CT, T), U):
                st, b_sc, x1, x2, x3, x4 = _group(st, b_sc, x1, x2, x3, x4, b_ip, v, kkq, g, beta, y, u, bos + t, t,
                                                  T, last, i_h, i_g, o_v, o_n, W, H, G, P, N, CT, TAU_, U, USE_BETA,
                                                  USE_UNCERTAINTY, SQK)

        if STORE_FINAL_STATE:  # the last token is a reference: the true states
            _store_state(mT + o_state, iT + o_state, o_s0, st, b_ip, W)

    # ---- backward ----------------------------------------------------------------------------------------------
    # One of BWD_VARIANTS: a warp owns 2 CPT channels of one head, a thread CPT channels x N / 16 states (one
    # [BV, N] tile per state), so that the walking state, the kept middle state of a 4-token block and the two
    # adjoints fit the registers (CPT 2: 4 x 16 values); NW warps per program stack channel blocks of the head and
    # sum dk, dq and the decay gradient across them (shared memory, inside the kernel) before the atomics. No pair
    # reciprocals here: one reciprocal per state and token is not what bounds the backward.

    @gluon.jit
    def _bwd_step(b_m, b_j, b_sc, v, kkq, g, beta, tok, t, T, i_h, i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr,
                  P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr, USE_BETA: gl.constexpr):
        """One recompute update (the forward's rule exactly, so the gauge of every token is the forward's):
        returns the new state, its log-scale and the token's carry ``c`` and scale ``e``."""
        b_la = gl.load(g + tok * H + i_h).to(gl.float64)
        b_grown = b_sc - b_la
        is_ref = (b_grown > TAU_) | (t % CT == CT - 1) | (t == T - 1)
        b_c = gl.where(is_ref, gl.exp((-b_grown).to(gl.float32)), 1.0)
        if is_ref:
            b_m, b_j = b_m * b_c, b_j * b_c
        b_sc = gl.where(is_ref, 0.0, b_grown)
        b_m, b_j, b_e = _bwd_plain(b_m, b_j, b_sc, v, kkq, beta, tok, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        return b_m, b_j, b_sc, b_c, b_e

    @gluon.jit
    def _bwd_walk(b_m, b_j, b_sc, start, end, v, kkq, g, beta, bos, T, i_h, i_g, o_v, o_n, H: gl.constexpr,
                  G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr,
                  USE_BETA: gl.constexpr):
        """The state after tokens ``start .. end - 1`` (positions in the sequence), with the last one's c and e."""
        b_c = gl.to_tensor(1.0)
        b_e = gl.to_tensor(1.0)
        for t in range(start, end):
            b_m, b_j, b_sc, b_c, b_e = _bwd_step(b_m, b_j, b_sc, v, kkq, g, beta, bos + t, t, T, i_h, i_g, o_v, o_n,
                                                 H, G, P, N, CT, TAU_, USE_BETA)
        return b_m, b_j, b_sc, b_c, b_e

    @gluon.jit
    def _bwd_scales4(b_sc, t, T, g, bos, i_h, H: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr):
        """``_bwd_step``'s scalar walk over tokens ``t .. t + 3`` (positions in the sequence) on the assumption
        that none of them is a reference: their log-scales, and whether one of them is (then the assumption is
        void and the caller takes the general path). The four decay loads issue together."""
        b_a0 = gl.load(g + (bos + t) * H + i_h).to(gl.float64)
        b_a1 = gl.load(g + (bos + t + 1) * H + i_h).to(gl.float64)
        b_a2 = gl.load(g + (bos + t + 2) * H + i_h).to(gl.float64)
        b_a3 = gl.load(g + (bos + t + 3) * H + i_h).to(gl.float64)
        s1 = b_sc - b_a0
        s2 = s1 - b_a1
        s3 = s2 - b_a2
        s4 = s3 - b_a3
        # a token of t .. t + 3 is a chunk's last (position CT - 1 modulo CT) exactly when t % CT >= CT - 4
        over = (s1 > TAU_) | (s2 > TAU_) | (s3 > TAU_) | (s4 > TAU_)
        any_ref = over | (t % CT >= CT - 4) | ((t <= T - 1) & (T - 1 <= t + 3))
        return s1, s2, s3, s4, any_ref

    @gluon.jit
    def _bwd_plain(b_m, b_j, b_sc, v, kkq, beta, tok, i_h, i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr,
                   P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr):
        """``_bwd_step`` of a token known not to be a reference, at its log-scale ``b_sc``: no carry, no branch."""
        b_e = gl.exp(b_sc.to(gl.float32))
        p_k = kkq + (tok * G + i_g) * (3 * N) + o_n
        b_v = gl.load(v + (tok * H + i_h) * P + o_v).to(gl.float32) * b_e
        b_m = b_m + gl.expand_dims(b_v, 1) * gl.expand_dims(gl.load(p_k), 0)
        if USE_BETA:
            b_b = gl.load(beta + (tok * H + i_h) * P + o_v).to(gl.float32) * b_e
            b_j = b_j + gl.expand_dims(b_b, 1) * gl.expand_dims(gl.load(p_k + N), 0)
        return b_m, b_j, b_e

    @gluon.jit
    def _bwd_walk4(b_m, b_j, b_sc, start, v, kkq, g, beta, bos, T, i_h, i_g, o_v, o_n, H: gl.constexpr,
                   G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr,
                   USE_BETA: gl.constexpr):
        """``_bwd_walk`` over the four tokens from ``start`` (all inside the sequence): branch-free when none of
        them is a reference."""
        s1, s2, s3, s4, any_ref = _bwd_scales4(b_sc, start, T, g, bos, i_h, H, CT, TAU_)
        if any_ref:
            b_m, b_j, b_sc, _, _ = _bwd_walk(b_m, b_j, b_sc, start, start + 4, v, kkq, g, beta, bos, T, i_h, i_g,
                                             o_v, o_n, H, G, P, N, CT, TAU_, USE_BETA)
        else:
            tok = bos + start
            b_m, b_j, _ = _bwd_plain(b_m, b_j, s1, v, kkq, beta, tok, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
            b_m, b_j, _ = _bwd_plain(b_m, b_j, s2, v, kkq, beta, tok + 1, i_h, i_g, o_v, o_n, H, G, P, N,
                                     USE_BETA)
            b_m, b_j, _ = _bwd_plain(b_m, b_j, s3, v, kkq, beta, tok + 2, i_h, i_g, o_v, o_n, H, G, P, N,
                                     USE_BETA)
            b_m, b_j, _ = _bwd_plain(b_m, b_j, s4, v, kkq, beta, tok + 3, i_h, i_g, o_v, o_n, H, G, P, N,
                                     USE_BETA)
            b_sc = s4
        return b_m, b_j, b_sc

    @gluon.jit
    def _bwd_reverse(b_m, b_j, b_c, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta, tok, i_h,
                     i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr,
                     USE_BETA: gl.constexpr, USE_DU: gl.constexpr, PROBE: gl.constexpr, CARRY: gl.constexpr = True):
        """The reverse step of token ``tok`` from its own rescaled state (``emulation._Adjoint.reverse``): writes
        ``dv``, ``dbeta``, adds ``dk``, ``dq``, ``dlog_decay``; returns the adjoints carried to the token before."""
        p_k = kkq + (tok * G + i_g) * (3 * N) + o_n
        b_k = gl.expand_dims(gl.load(p_k), 0)
        b_q = gl.expand_dims(gl.load(p_k + 2 * N), 0)
        o_y = (tok * H + i_h) * P + o_v
        b_dy = gl.load(dy + o_y).to(gl.float32)
        b_r = _rcp(b_j + b_ip * b_e)
        b_w = b_q * b_r
        b_mu = b_m * b_r
        b_gw = gl.expand_dims(b_dy, 1) * b_w
        b_dm = b_dm + b_gw
        b_dj = b_dj - b_gw * b_mu
        b_dq = gl.sum(b_mu * gl.expand_dims(b_dy, 1), axis=0)
        if USE_DU:  # u = e sum_N q^2 / D
            b_edu = gl.expand_dims(gl.load(du + o_y).to(gl.float32) * b_e, 1)
            b_dj = b_dj - b_edu * b_w * b_w
            b_dq += 2 * gl.sum(b_edu * b_r, axis=0) * gl.load(p_k + 2 * N)
        b_v = gl.load(v + o_y).to(gl.float32)
        b_dv = gl.sum(b_dm * b_k, axis=1) * b_e
        b_dk = gl.sum(b_dm * gl.expand_dims(b_v, 1), axis=0)
        # the decay gradient from token t's own state (kernel-design.md's identities, gauge form)
        b_da = gl.sum(gl.sum(b_dm * b_m + b_dj * b_j, axis=1) - b_v * b_dv, axis=0)
        if USE_BETA:
            b_b = gl.load(beta + o_y).to(gl.float32)
            b_db = gl.sum(b_dj * gl.expand_dims(gl.load(p_k + N), 0), axis=1) * b_e
            b_dk += 2 * gl.load(p_k) * gl.sum(b_dj * gl.expand_dims(b_b, 1), axis=0)
            b_da -= gl.sum(b_b * b_db, axis=0)
            gl.store(dbeta + o_y, b_db.to(dbeta.dtype.element_ty))
        gl.store(dv + o_y, b_dv.to(dv.dtype.element_ty))
        # relaxed: nothing here reads these sums back, and acq_rel would fence every atomic
        if PROBE != 1:  # the probe leaves these out, to time what they cost
            gl.atomic_add(dk + (tok * G + i_g) * N + o_n, b_dk * b_e, sem="relaxed")
            gl.atomic_add(dq + (tok * G + i_g) * N + o_n, b_dq, sem="relaxed")
        gl.atomic_add(dg + tok * H + i_h, b_da, sem="relaxed")
        if CARRY:  # (not when the caller knows the token is no reference)
            if b_c != 1.0:  # a reference token: carry the adjoints into the previous token's gauge (warp-uniform)
                b_dm, b_dj = b_dm * b_c, b_dj * b_c
        return b_dm, b_dj

    @gluon.jit
    def _bwd_store_scale(p_s, b_sc, NW: gl.constexpr):
        """Store the float64 log-scale once per thread: a scalar store is issued by one thread only, and the others
        reading it back would race with it (no fence between them)."""
        LL: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        gl.store(p_s + gl.arange(0, 32 * NW, layout=LL), gl.full([32 * NW], 0.0, gl.float64, LL) + b_sc)

    @gluon.jit
    def _bwd_load_scale(p_s, NW: gl.constexpr):
        """The log-scale stored by ``_bwd_store_scale``, each thread reading its own copy."""
        LL: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
        return gl.max(gl.load(p_s + gl.arange(0, 32 * NW, layout=LL)), axis=0)

    @gluon.jit
    def _bwd_keep(b_m, b_j, b_sc, slot, count, start, EVERY: gl.constexpr, p_m, p_j, p_s, o_s, v, kkq, g, beta,
                  bos, T, i_h, i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr,
                  BV: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr, USE_BETA: gl.constexpr, NW: gl.constexpr,
                  BLOCK4: gl.constexpr):
        """Walk ``count`` groups of ``EVERY`` tokens from ``start``, keeping the state (and its log-scale) before
        each group in scratch slots ``slot, slot + 1, ...`` (``emulation._keep_every``). Every thread reads back
        only what it wrote itself (same layout; the scale one copy per lane), so no barrier is needed."""
        for b in range(count):
            gl.store(p_m + (slot + b) * BV * N + o_s, b_m)
            gl.store(p_j + (slot + b) * BV * N + o_s, b_j)
            _bwd_store_scale(p_s + (slot + b) * 32 * NW, b_sc, NW)
            if b < count - 1:  # a whole group inside the sequence
                if BLOCK4:
                    for i4 in gl.static_range(EVERY // 4):
                        b_m, b_j, b_sc = _bwd_walk4(b_m, b_j, b_sc, start + EVERY * b + 4 * i4, v, kkq, g, beta,
                                                    bos, T, i_h, i_g, o_v, o_n, H, G, P, N, CT, TAU_, USE_BETA)
                else:
                    b_m, b_j, b_sc, _, _ = _bwd_walk(b_m, b_j, b_sc, start + EVERY * b, start + EVERY * b + EVERY,
                                                     v, kkq, g, beta, bos, T, i_h, i_g, o_v, o_n, H, G, P, N, CT,
                                                     TAU_, USE_BETA)

    @gluon.jit
    def _bwd_block4(b_dm, b_dj, b_m0, b_j0, b_s0, ts, p_m0, p_j0, b_ip, v, kkq, g, beta, dy, du, dv, dk, dq, dg,
                    dbeta, bos, T, i_h, i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr,
                    N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr, USE_BETA: gl.constexpr,
                    USE_DU: gl.constexpr, PROBE: gl.constexpr):
        """The reverse steps of the whole 4-token block from ``ts``, from its first state in scratch (``p_m0``,
        ``p_j0``; loaded as ``b_m0``, ``b_j0``; log-scale ``b_s0``), with two states live: the middle (token
        ts + 1) and the walking one."""
        b_mm, b_jm, b_sm, b_cm, b_em = _bwd_walk(b_m0, b_j0, b_s0, ts, ts + 2, v, kkq, g, beta, bos, T, i_h, i_g, o_v,
                                                 o_n, H, G, P, N, CT, TAU_, USE_BETA)
        b_m, b_j, _, b_c, b_e = _bwd_walk(b_mm, b_jm, b_sm, ts + 2, ts + 4, v, kkq, g, beta, bos, T, i_h, i_g, o_v,
                                          o_n, H, G, P, N, CT, TAU_, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, b_c, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  bos + ts + 3, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE)
        b_m, b_j, _, b_c, b_e = _bwd_walk(b_mm, b_jm, b_sm, ts + 2, ts + 3, v, kkq, g, beta, bos, T, i_h, i_g, o_v,
                                          o_n, H, G, P, N, CT, TAU_, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, b_c, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  bos + ts + 2, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE)
        b_dm, b_dj = _bwd_reverse(b_mm, b_jm, b_cm, b_em, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg,
                                  dbeta, bos + ts + 1, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE)
        # the block start again from the scratch (an L1 hit) rather than live in registers
        b_m0 = gl.load(p_m0)
        b_j0 = gl.load(p_j0)
        b_m, b_j, _, b_c, b_e = _bwd_walk(b_m0, b_j0, b_s0, ts, ts + 1, v, kkq, g, beta, bos, T, i_h, i_g, o_v, o_n,
                                          H, G, P, N, CT, TAU_, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, b_c, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  bos + ts, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE)
        return b_dm, b_dj

    @gluon.jit
    def _bwd_block4_plain(b_dm, b_dj, b_m0, b_j0, s1, s2, s3, s4, ts, p_m0, p_j0, b_ip, v, kkq, beta, dy, du, dv,
                          dk, dq, dg, dbeta, bos, i_h, i_g, o_v, o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr,
                          N: gl.constexpr, USE_BETA: gl.constexpr, USE_DU: gl.constexpr, PROBE: gl.constexpr):
        """``_bwd_block4`` for a block none of whose tokens is a reference (log-scales ``s1 .. s4`` from
        ``_bwd_scales4``): the same updates and reverse steps in the same order, so the same results, but no
        carry and no branch: one basic block, whose loads ptxas may issue ahead of the arithmetic."""
        tok = bos + ts
        b_mm, b_jm, _ = _bwd_plain(b_m0, b_j0, s1, v, kkq, beta, tok, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        b_mm, b_jm, b_em = _bwd_plain(b_mm, b_jm, s2, v, kkq, beta, tok + 1, i_h, i_g, o_v, o_n, H, G, P, N,
                                      USE_BETA)
        b_m, b_j, _ = _bwd_plain(b_mm, b_jm, s3, v, kkq, beta, tok + 2, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        b_m, b_j, b_e = _bwd_plain(b_m, b_j, s4, v, kkq, beta, tok + 3, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, 1.0, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  tok + 3, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE, False)
        b_m, b_j, b_e = _bwd_plain(b_mm, b_jm, s3, v, kkq, beta, tok + 2, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, 1.0, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  tok + 2, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE, False)
        b_dm, b_dj = _bwd_reverse(b_mm, b_jm, 1.0, b_em, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg,
                                  dbeta, tok + 1, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE, False)
        b_m0 = gl.load(p_m0)
        b_j0 = gl.load(p_j0)
        b_m, b_j, b_e = _bwd_plain(b_m0, b_j0, s1, v, kkq, beta, tok, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA)
        b_dm, b_dj = _bwd_reverse(b_m, b_j, 1.0, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg, dbeta,
                                  tok, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA, USE_DU, PROBE, False)
        return b_dm, b_dj

    @gluon.jit
    def palimpsa_gluon_bwd_kernel(
        v, kkq, g, beta, ip, ck_m, ck_i, dy, du, dmT, diT, sc_m, sc_j, sc_s, dv, dk, dq, dg, dbeta, dm0, di0,
        cu_seqlens, chunk_offsets, T,
        H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr,
        CPT: gl.constexpr, NW: gl.constexpr, PROBE: gl.constexpr, USE_BETA: gl.constexpr,
        USE_INITIAL_STATE: gl.constexpr, USE_INITIAL_IMPORTANCE: gl.constexpr,
        USE_FINAL_STATE_GRADIENT: gl.constexpr, USE_DU: gl.constexpr, IS_VARLEN: gl.constexpr,
        BLOCK4: gl.constexpr = 0,
    ):
        # the schedule of emulation._backward_one: checkpoint -> every 16th state (slab) -> every 4th -> 2 slots
        NB: gl.constexpr = CT // 16
        BV: gl.constexpr = 2 * CPT * NW
        SS: gl.constexpr = 32 * NW  # the scale's slot in sc_s: a copy per thread
        L: gl.constexpr = gl.BlockedLayout([CPT, N // 16], [2, 16], [NW, 1], [1, 0])
        LV: gl.constexpr = gl.SliceLayout(1, L)
        LN: gl.constexpr = gl.SliceLayout(0, L)

        i_v, i_nh, i_h, i_g, bos, T, boc = _program(cu_seqlens, chunk_offsets, T, H, G, CT, IS_VARLEN)
        o_v = i_v * BV + gl.arange(0, BV, layout=LV)
        o_n = gl.arange(0, N, layout=LN)
        o_s = gl.expand_dims(gl.arange(0, BV, layout=LV) * N, 1) + gl.expand_dims(o_n, 0)
        o_state = (i_nh.to(gl.int64) * P + i_v * BV) * N
        # this program's scratch: NB slab states, then 4 states of the current slab block (each [BV, N] + scale)
        i_p = i_nh.to(gl.int64) * gl.num_programs(0) + i_v
        o_sc = i_p * (NB + 4) * BV * N
        o_ss = i_p * (NB + 4)
        b_ip = gl.load(ip)

        if USE_FINAL_STATE_GRADIENT:  # the last token is a reference (e = 1): the true adjoints
            b_dm = gl.load(dmT + o_state + o_s)
            b_dj = gl.load(diT + o_state + o_s)
        else:
            b_dm = gl.zeros([BV, N], gl.float32, L)
            b_dj = gl.zeros([BV, N], gl.float32, L)

        NT = gl.cdiv(T, CT)
        for i_r in range(NT):
            i_c = NT - 1 - i_r
            t0 = i_c * CT
            nb = gl.cdiv(gl.minimum(CT, T - t0), 16)
            # pass A: the chunk from its checkpoint (a true state, e = 1), every 16th state into the slab
            o_ck = (((boc + i_c) * H + i_h) * P + i_v * BV) * N
            b_m = gl.load(ck_m + o_ck + o_s)
            b_j = gl.load(ck_i + o_ck + o_s) - b_ip
            b_sc = gl.to_tensor(0.0).to(gl.float64)
            _bwd_keep(b_m, b_j, b_sc, 0, nb, t0, 16, sc_m + o_sc, sc_j + o_sc, sc_s + o_ss * SS, o_s, v, kkq, g, beta,
                      bos, T, i_h, i_g, o_v, o_n, H, G, P, N, BV, CT, TAU_, USE_BETA, NW, BLOCK4)
            for i_br in range(nb):
                b = nb - 1 - i_br
                tb = t0 + 16 * b
                te = gl.minimum(tb + 16, T)
                # pass B: the slab block from its state, every 4th state into the next four scratch slots
                b_m = gl.load(sc_m + o_sc + b * BV * N + o_s)
                b_j = gl.load(sc_j + o_sc + b * BV * N + o_s)
                b_sc = _bwd_load_scale(sc_s + (o_ss + b) * SS, NW)
                ns = gl.cdiv(te - tb, 4)
                _bwd_keep(b_m, b_j, b_sc, NB, ns, tb, 4, sc_m + o_sc, sc_j + o_sc, sc_s + o_ss * SS, o_s, v, kkq, g,
                          beta, bos, T, i_h, i_g, o_v, o_n, H, G, P, N, BV, CT, TAU_, USE_BETA, NW, BLOCK4)
                for i_sr in range(ns):
                    s = ns - 1 - i_sr
                    ts = tb + 4 * s
                    n = gl.minimum(4, te - ts)
                    p_m0 = sc_m + o_sc + (NB + s) * BV * N + o_s
                    p_j0 = sc_j + o_sc + (NB + s) * BV * N + o_s
                    b_m0 = gl.load(p_m0)
                    b_j0 = gl.load(p_j0)
                    b_s0 = _bwd_load_scale(sc_s + (o_ss + NB + s) * SS, NW)
                    if n == 4:
                        if BLOCK4:
                            s1, s2, s3, s4, any_ref = _bwd_scales4(b_s0, ts, T, g, bos, i_h, H, CT, TAU_)
                            if any_ref:
                                b_dm, b_dj = _bwd_block4(b_dm, b_dj, b_m0, b_j0, b_s0, ts, p_m0, p_j0, b_ip, v, kkq,
                                                         g, beta, dy, du, dv, dk, dq, dg, dbeta, bos, T, i_h, i_g,
                                                         o_v, o_n, H, G, P, N, CT, TAU_, USE_BETA, USE_DU, PROBE)
                            else:
                                b_dm, b_dj = _bwd_block4_plain(b_dm, b_dj, b_m0, b_j0, s1, s2, s3, s4, ts, p_m0,
                                                               p_j0, b_ip, v, kkq, beta, dy, du, dv, dk, dq, dg,
                                                               dbeta, bos, i_h, i_g, o_v, o_n, H, G, P, N, USE_BETA,
                                                               USE_DU, PROBE)
                        else:
                            b_dm, b_dj = _bwd_block4(b_dm, b_dj, b_m0, b_j0, b_s0, ts, p_m0, p_j0, b_ip, v, kkq, g,
                                                     beta, dy, du, dv, dk, dq, dg, dbeta, bos, T, i_h, i_g, o_v, o_n,
                                                     H, G, P, N, CT, TAU_, USE_BETA, USE_DU, PROBE)
                    else:  # a sequence's tail block: walk from the block start to each token in turn
                        for i_l in range(n):
                            last = ts + n - 1 - i_l
                            b_m, b_j, _, b_c, b_e = _bwd_walk(b_m0, b_j0, b_s0, ts, last + 1, v, kkq, g, beta, bos,
                                                              T, i_h, i_g, o_v, o_n, H, G, P, N, CT, TAU_, USE_BETA)
                            b_dm, b_dj = _bwd_reverse(b_m, b_j, b_c, b_e, b_dm, b_dj, b_ip, v, kkq, beta, dy, du,
                                                      dv, dk, dq, dg, dbeta, bos + last, i_h, i_g, o_v, o_n, H, G,
                                                      P, N, USE_BETA, USE_DU, PROBE)

        if USE_INITIAL_STATE:  # the start is a true state: the carried adjoints are dM0, dI0
            gl.store(dm0 + o_state + o_s, b_dm)
        if USE_INITIAL_IMPORTANCE:
            gl.store(di0 + o_state + o_s, b_dj)

FWD_POINTERS = ("v", "kkq", "g", "beta", "m0", "i0", "ip", "y", "u", "ck_m", "ck_i", "mT", "iT",
                "cu_seqlens", "chunk_offsets")


BWD_POINTERS = ("v", "kkq", "g", "beta", "ip", "ck_m", "ck_i", "dy", "du", "dmT", "diT", "sc_m", "sc_j", "sc_s", "dv",
                "dk", "dq", "dg", "dbeta", "dm0", "di0", "cu_seqlens", "chunk_offsets")


def _compile(kernel, pointers: tuple, types: dict, constexprs: dict, arch: int, num_warps: int = 1,
             maxnreg: int = 0):
    """``triton.compile`` of a Gluon kernel for ``sm_<arch>a`` without a GPU, every pointer 16-byte aligned (the
    specialisation a launch with fresh PyTorch tensors gets)."""
    from triton.backends.compiler import GPUTarget

    signature = {name: types.get(name, "*fp32") for name in pointers}
    signature["T"] = "i32"
    signature.update({name: "constexpr" for name in constexprs})
    attrs = {(index,): [["tt.divisibility", 16]] for index in range(len(pointers))}
    source = GluonASTSource(kernel, signature, constexprs, attrs)
    options = {"num_warps": num_warps, **FP_FUSION, **({"maxnreg": maxnreg} if maxnreg else {})}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def compile_backward(*, variant: str = "b2w1", dtype: str = "bf16", heads: int = 80, groups: int = 1,
                     head_dim: int = 64, state_size: int = 128, chunk_size: int = 256, use_beta: bool = True,
                     use_initial_state=False, use_initial_importance=False, use_final_state_gradient=False,
                     use_du=False, is_varlen=False, arch: int = 90):
    """Compile the backward kernel (one of ``BWD_VARIANTS``) for ``sm_<arch>a`` without a GPU (see
    :func:`compile_forward`)."""
    mapping = BWD_VARIANTS[variant]
    constexprs = {"H": heads, "G": groups, "P": head_dim, "N": state_size, "CT": chunk_size, "TAU_": TAU,
                  "CPT": mapping.CPT, "NW": mapping.NW, "PROBE": mapping.PROBE, "BLOCK4": mapping.BLOCK4,
                  "USE_BETA": use_beta,
                  "USE_INITIAL_STATE": use_initial_state, "USE_INITIAL_IMPORTANCE": use_initial_importance,
                  "USE_FINAL_STATE_GRADIENT": use_final_state_gradient, "USE_DU": use_du, "IS_VARLEN": is_varlen}
    types = {name: f"*{dtype}" for name in ("v", "beta", "dy", "du", "dv", "dbeta")}
    types.update({"g": "*fp32", "sc_s": "*fp64", "cu_seqlens": "*i32", "chunk_offsets": "*i32"})
    return _compile(palimpsa_gluon_bwd_kernel, BWD_POINTERS, types, constexprs, arch, mapping.NW,
                    mapping.MAXNREG)


def _forward_constexprs(variant: FwdVariant) -> dict:
    return {"CPT": variant.CPT, "LV": variant.LV, "NW": variant.NW, "U": variant.U, "SQK": variant.SQK}


def compile_forward(*, variant: str = FALLBACK_VARIANT, dtype: str = "bf16", heads: int = 80, groups: int = 1,
                    head_dim: int = 64, state_size: int = 128, chunk_size: int = 256, use_beta: bool = True,
                    use_initial_state=False, use_initial_importance=False, store_final_state=False,
                    store_checkpoints=True, use_uncertainty=False, is_varlen=False, arch: int = 90):
    """Compile the forward kernel (one of ``FWD_VARIANTS``) for ``sm_<arch>a`` without a GPU (``triton.compile``
    with a target), with the specialisation a launch gets (16-byte aligned pointers). Returns the
    ``CompiledKernel`` (``asm['ptx']``, ``asm['cubin']``)."""
    mapping = FWD_VARIANTS[variant]
    constexprs = {"H": heads, "G": groups, "P": head_dim, "N": state_size, "CT": chunk_size, "TAU_": TAU,
                  **_forward_constexprs(mapping), "USE_BETA": use_beta, "USE_INITIAL_STATE": use_initial_state,
                  "USE_INITIAL_IMPORTANCE": use_initial_importance, "STORE_FINAL_STATE": store_final_state,
                  "STORE_CHECKPOINTS": store_checkpoints, "USE_UNCERTAINTY": use_uncertainty,
                  "IS_VARLEN": is_varlen}
    types = {"v": f"*{dtype}", "beta": f"*{dtype}", "y": f"*{dtype}", "u": f"*{dtype}", "g": "*fp32",
             "cu_seqlens": "*i32", "chunk_offsets": "*i32"}
    return _compile(palimpsa_gluon_fwd_kernel, FWD_POINTERS, types, constexprs, arch, mapping.NW, mapping.MAXNREG)


def gluon_forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, output_final_state,
                  output_uncertainty, store_checkpoints, chunk_size, variant: str | None = None):
    """Launch the Gluon forward: ``y, M_T, I_T, u`` (None where not asked for) and the checkpoints, exactly as
    ``fused_recurrent._forward`` returns them (same shapes, dtypes and checkpoint layout). ``variant``: a name of
    ``FWD_VARIANTS``, or None for :func:`forward_variant`'s choice."""
    from . import fused_recurrent as ts

    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    n_states = ts._n_states(batch, cu_seqlens)
    if variant is None:
        variant = forward_variant(n_states * heads, head_dim, state_size)
    mapping = FWD_VARIANTS[variant]
    if (reason := mapping.unsupported(head_dim, state_size)) is not None:
        raise ValueError(f"the Gluon forward variant {variant} cannot run these shapes: {reason}")
    if chunk_size % mapping.U:
        raise ValueError(f"the Gluon forward variant {variant} walks {mapping.U} tokens at a time: chunk_size "
                         f"({chunk_size}) must divide by {mapping.U}")
    device = v.device
    ip = ts._prior_tensor(importance_prior, torch.float32, device)
    offsets, n_chunks = ts._chunk_offsets(cu_seqlens, batch, length, chunk_size)
    # the prologue: float32 k, k^2 (unless the kernel squares k), q once per call, shared by the heads of a group,
    # packed [B, T, G, 3 or 2, N]
    k32 = k.float()
    kkq = torch.stack((k32, q.float()) if mapping.SQK else (k32, k32 * k32, q.float()), dim=3)
    y = ts._output(v.shape, v.dtype, device)
    u = ts._output(v.shape, v.dtype, device) if output_uncertainty else None
    final_shape, ck_shape = ts._output_shapes(v, k, cu_seqlens, n_chunks, store_checkpoints)
    m_t = ts._output(final_shape, torch.float32, device) if output_final_state else None
    i_t = ts._output(final_shape, torch.float32, device) if output_final_state else None
    ck_m = torch.empty(ck_shape, dtype=torch.float32, device=device)
    ck_i = torch.empty(ck_shape, dtype=torch.float32, device=device)
    grid = (head_dim // mapping.block_v(), n_states * heads)
    palimpsa_gluon_fwd_kernel[grid](
        v, kkq, log_decay, beta, m0, i0, ip, y, u, ck_m, ck_i, m_t, i_t, cu_seqlens, offsets, length,
        H=heads, G=groups, P=head_dim, N=state_size, CT=chunk_size, TAU_=TAU, **_forward_constexprs(mapping),
        USE_BETA=beta is not None, USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None,
        STORE_FINAL_STATE=output_final_state, STORE_CHECKPOINTS=store_checkpoints,
        USE_UNCERTAINTY=output_uncertainty, IS_VARLEN=cu_seqlens is not None, num_warps=mapping.NW,
        **FP_FUSION, **({"maxnreg": mapping.MAXNREG} if mapping.MAXNREG else {}),
    )
    return y, m_t, i_t, u, ck_m, ck_i


def gluon_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t, di_t, du, chunk_size,
                   variant: str | None = None):
    """Launch the Gluon backward on the checkpoints of either forward: the gradients of ``v, k, q, log_decay,
    beta, M0, I0`` (None where absent), as ``fused_recurrent._backward`` returns them. ``variant``: a name of
    ``BWD_VARIANTS``, or None for :func:`backward_variant`'s choice."""
    from . import fused_recurrent as ts

    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    if chunk_size % 16:
        raise ValueError(f"the Gluon backward keeps every 16th state: chunk_size ({chunk_size}) must divide by 16")
    n_states = ts._n_states(batch, cu_seqlens)
    offsets = ts._first_checkpoints(cu_seqlens, chunk_size)
    device = v.device
    mapping = BWD_VARIANTS[variant or backward_variant(n_states * heads, head_dim)]
    if head_dim % mapping.block_v():
        raise ValueError(f"P = {head_dim} is not a multiple of the Gluon backward's {mapping.block_v()} channels")
    grid = (head_dim // mapping.block_v(), n_states * heads)
    use_final_grad = dm_t is not None or di_t is not None
    if use_final_grad:
        dm_t = torch.zeros_like(ck_m[:1].expand(n_states, -1, -1, -1)) if dm_t is None else dm_t
        di_t = torch.zeros_like(dm_t) if di_t is None else di_t
        dm_t, di_t = dm_t.float().contiguous(), di_t.float().contiguous()
    k32 = k.float()
    kkq = torch.stack((k32, k32 * k32, q.float()), dim=3)
    slots = chunk_size // 16 + 4  # per program: the slab of a chunk, then the 4 states of a slab block
    sc_m = torch.empty(grid[0] * grid[1] * slots * mapping.block_v() * state_size, dtype=torch.float32, device=device)
    sc_j = torch.empty_like(sc_m)
    sc_s = torch.empty(grid[0] * grid[1] * slots * 32 * mapping.NW, dtype=torch.float64,
                       device=device)  # a copy per thread
    buffers = ts._gradient_buffers(v, k, q, log_decay, beta, m0, i0)  # float32 states: Gluon takes no float64
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    palimpsa_gluon_bwd_kernel[grid](
        v, kkq, log_decay, beta, ip, ck_m, ck_i, dy.contiguous(), None if du is None else du.contiguous(), dm_t,
        di_t, sc_m, sc_j, sc_s, dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets, length,
        H=heads, G=groups, P=head_dim, N=state_size, CT=chunk_size, TAU_=TAU, CPT=mapping.CPT, NW=mapping.NW,
        PROBE=mapping.PROBE, BLOCK4=mapping.BLOCK4,
        USE_BETA=beta is not None, USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None,
        USE_FINAL_STATE_GRADIENT=use_final_grad, USE_DU=du is not None, IS_VARLEN=cu_seqlens is not None,
        num_warps=mapping.NW, **FP_FUSION, **({"maxnreg": mapping.MAXNREG} if mapping.MAXNREG else {}),
    )
    return ts._input_gradients(buffers, k, q, log_decay, m0, i0)

def _cuda_tool(name: str) -> str:
    """A CUDA binary tool shipped inside the Triton wheel (``cuobjdump``, ``nvdisasm``)."""
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def resource_usage(compiled) -> dict:
    """Registers, local memory (spills) and static shared memory of a compiled kernel, from its cubin
    (``cuobjdump --dump-resource-usage``: no GPU and no driver needed)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        text = subprocess.run([_cuda_tool("cuobjdump"), "--dump-resource-usage", cubin.name], capture_output=True,
                              text=True, check=True).stdout
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text))
    return {"registers": int(found["REG"]), "stack": int(found["STACK"]), "shared": int(found["SHARED"]),
            "local": int(found["LOCAL"])}


def disassemble(compiled, line_info: bool = False) -> str:
    """A compiled kernel's SASS as ``nvdisasm -c`` prints it (``-g``, ``line_info``: with the source lines each run
    of instructions came from), from its cubin: no GPU and no driver needed."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        return subprocess.run([_cuda_tool("nvdisasm"), "-c", *(["-g"] if line_info else []), cubin.name],
                              capture_output=True, text=True, check=True).stdout


def largest_block(compiled) -> dict:
    """The kernel's longest straight run of SASS (no label inside, ended by a branch or a label), from
    ``nvdisasm``: its length, and how many global loads it issues before its first FFMA (how far ptxas could
    hoist a group's loads ahead of the arithmetic that waits on them)."""
    sass = disassemble(compiled)
    opcode = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)")
    blocks, block = [], []
    for line in sass.splitlines():
        if re.match(r"^\.L_x_\d+:", line):
            blocks.append(block)
            block = []
        elif m := opcode.match(line):
            block.append(m.group(1))
            if m.group(1) in ("BRA", "EXIT", "RET", "CALL"):
                blocks.append(block)
                block = []
    longest = max([*blocks, block], key=len)
    first_ffma = longest.index("FFMA") if "FFMA" in longest else len(longest)
    return {"instructions": len(longest), "loads_before_arithmetic": longest[:first_ffma].count("LDG")}


def loop_instructions(compiled, tokens: int) -> dict:
    """SASS opcode counts of the kernel's token loop, ``tokens`` per iteration (the largest innermost back-edge's
    body: the forward's token loop, the backward's recompute walk), from ``nvdisasm``. The main path is the
    shortest way through the body (the renormalising blocks are what a branch skips or what the longer side of
    an if/else adds); everything else in the body is counted apart. Keys: ``opcodes`` (main path), ``branch``
    (the rest of the body), ``tokens``."""
    sass = disassemble(compiled)
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", line))}
    branch = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[T0-9]\s+)?BRA[^`]*`\((\.L_x_\d+)\)")
    # the token loop: the back-edge spanning the most instructions among the innermost ones (a back-edge whose
    # range holds no other back-edge)
    edges = [(labels[m.group(2)], i) for i, line in enumerate(lines)
             if (m := branch.search(line)) and labels.get(m.group(2), i) < i]
    inner = [e for e in edges if not any(o != e and e[0] <= o[0] and o[1] <= e[1] for o in edges)]
    start, end = max(inner, key=lambda e: e[1] - e[0])
    opcode = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)")
    # shortest path (in instructions) from each line to the back-edge, over the body's forward branches
    cost, step = {end + 1: 0}, {}
    for i in range(end, start - 1, -1):
        m = branch.search(lines[i])
        nexts = [i + 1]
        if m and i != end and start < labels[m.group(2)] <= end + 1:
            nexts = [labels[m.group(2)]] if m.group(1) is None else [i + 1, labels[m.group(2)]]
        best = min(nexts, key=lambda j: cost.get(j, float("inf")))
        cost[i] = cost.get(best, float("inf")) + (1 if opcode.match(lines[i]) else 0)
        step[i] = best
    main, i = set(), start
    while i <= end:
        main.add(i)
        i = step[i]
    opcodes, rest = {}, {}
    for i in range(start, end + 1):
        m = opcode.match(lines[i])
        if m:
            counts = opcodes if i in main else rest
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return {"opcodes": opcodes, "branch": rest, "tokens": tokens}
