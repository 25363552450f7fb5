"""The chunk-parallel backward's local pass in Gluon, with each block's recomputed states in shared memory.

The Triton local pass (``chunked_bwd.palimpsa_bwd_local_kernel``, ``fused_recurrent._reverse_chunk``) keeps
every state in registers, so pass B recomputes each pair of tokens from its block's start: 3.5 state updates a
token, and three states of a pair live at once. Plain Triton cannot place a tensor in shared memory; Gluon can.
This kernel computes the same gradients (the reverse step's operations, but for the decay gradient's sum, in two
chains instead of one, and the states' form below) with pass B split into segments of ``SEG`` tokens: a segment is
walked once from the block start, each state before one of its tokens stored in shared memory (one buffer per
state, channel and slot, so that the stores need no barrier between them), and its reverse steps read them back.
``SEG = BS`` walks a block once in pass B (2 updates a token in all, ``BS`` slots: 4 KB each); ``SEG = BS / 2``
walks the first half again (2.5 a token, half the slots). Pass B's walks keep ``(M, J)``, ``J = I - I_prior``;
with ``WALK_RESCALE``, over a block whose log decays' magnitudes sum to at most ``fused_recurrent.RESCALE_TAU``
(pass A's test), in rescaled states ``M / A``, ``J / A`` (``A`` the decay since the block start): one FFMA per
state and token instead of two. Each slot's scale is kept (a scalar), and the reverse step works on the rescaled
states directly: ``M / I = M' / (J' + I_prior / A)``, the output gradient scaled by ``1 / A``, and the decay
gradient's sum over the previous state scaled back once. It is a gain where more programs an SM hide the latencies
(the 12-an-SM preset: 10.22 ms against 10.42), a small loss at the default 8 (10.79 against 10.73;
docs/bench/rescaled-walk-2026-11-28), so it is on in the preset only.

``STAGE``: pass B also copies each block's inputs to shared memory at the block's start (``cp.async``, masked tokens
zero-filled), and the walks and reverse steps read them there instead of through an L1 that the states' shared
memory has shrunk. 1 copies the key and query rows (8 KB more a program in float32), 2 also the program's 4 channels
of values and gains, 3 (the default) also the decays and output gradients, so that no step of pass B reads global
memory (:func:`staging_level` says what the tensors allow). ``WIDEN`` (the default): 16-bit values and gains are
widened once a block, output gradients once a segment, into float32 copies, so that each of a token's ~6 reads of
them is one 16-byte load instead of a load and 4 unpacking instructions (they cost 2.7 instructions an
element-token; the local pass 11.18 ms against 11.27 in bf16). With ``PIPE`` (the default) each walk token's inputs
are read a token ahead. 3 beats the Triton pass, and more so with ``PIPE``; 1 and 2 do not
(docs/bench/gluon-stage-2026-11-28). ``L2PF``, a bitmask, asks for lines in L2 a block ahead: 4 (the default) pass
B's next block start state, from the slab or the checkpoint (2.4% faster); 1 the next block's staged inputs; 2 pass
A's prefetches instead of in L1 (docs/bench/gluon-auto-2026-11-28). Asking for the next start state in L1 as a
block's last segment starts lost (docs/bench/rescaled-walk-2026-11-28, call 3).

Mapping: one warp owns 4 channels of one head; lane ``l`` holds states ``4 l .. 4 l + 3`` of every channel. A
state is 8 ``[N]`` tensors, ``M`` and ``I`` of each channel (so every sum over the channels is an FFMA chain),
and a lane's 4 states split out of them for the sums over ``N``. A pair's ``dv``, ``dbeta`` and decay gradients
are reduced over the lanes by one butterfly each (as ``fused_recurrent._pair_rows``: inline PTX shuffles).

Whole walks (``WHOLE``, where one split runs): a work item takes its sequence's chunks from the last with the
adjoints carried across them from the final-state gradient, so every gradient it writes is whole and the backward's
carry and corrections do not run (at B = 4, L = 8192: the backward 45.7 ms against the sequential Triton kernel's
50.0; docs/bench/whole-2026-11-28).

Scope (:func:`unsupported` says what it refuses; the Triton local pass runs there): Hopper-class GPUs, Gluon,
128 states, ``P`` a multiple of 4, float32 states (16-bit or float32 inputs), no uncertainty gradient. The
persistent work distribution, the slab and every output are the Triton local pass's, so the carry and the
corrections run after it unchanged.
"""

from __future__ import annotations

import torch
import triton

from . import fused_recurrent as fr
from .gluon_scan import GLUON_IMPORT_ERROR, GluonASTSource, gl, gluon

if gluon is not None:
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    # cp.async from global to shared memory: async_copy_global_to_shared up to Triton 3.7, async_load from 3.9
    _async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    # a shared buffer viewed with another layout: reinterpret from Triton 3.9, _reinterpret before
    PUBLIC_REINTERPRET = triton.language.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))

BV = 4  # channels per program (one warp)
BUTTERFLY16, BUTTERFLY8 = fr.STAGE16, fr.STAGE8
XOR8, XOR4, XOR2, XOR1 = fr.XOR8, fr.XOR4, fr.XOR2, fr.XOR1
LOG2E = triton.language.constexpr(1.4426950408889634)
TAU = triton.language.constexpr(fr.RESCALE_TAU)


def unsupported(v: torch.Tensor, k: torch.Tensor, beta, du, dy=None, *, block_size: int = 8, seg: int = 4,
                fast_exp: bool = True) -> str | None:
    """Why the Gluon local pass cannot run these inputs and settings (None: it can): what it maps first, then the
    machine. ``v``, ``beta`` and ``dy`` are read 4 channels at a time by one vector load, so their first element
    must be aligned to 4 elements."""
    if gluon is None:
        return f"this Triton has no Gluon ({GLUON_IMPORT_ERROR})"
    if v.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"{v.dtype} inputs keep float64 states, which the Gluon local pass does not hold"
    if beta is not None and beta.dtype != v.dtype:
        return f"beta ({beta.dtype}) and v ({v.dtype}) differ in dtype; the pass stores dv and dbeta as one"
    if k.shape[3] != 128:
        return f"the Gluon local pass maps 128 states, not {k.shape[3]}"
    if v.shape[3] % BV:
        return f"the Gluon local pass needs P a multiple of {BV}, not {v.shape[3]}"
    if du is not None:
        return "the Gluon local pass has no uncertainty gradient"
    if seg not in (2, 4, 8) or block_size % seg:
        return f"SEG {seg} must be 2, 4 or 8 and divide the block size {block_size}"
    if not fast_exp:
        return "the Gluon local pass takes every decay from ex2.approx (FAST_EXP)"
    for name, t in (("v", v), ("beta", beta), ("dy", dy)):
        if t is not None and t.data_ptr() % (BV * t.element_size()):
            return f"{name} starts at an address not aligned to {BV} elements (a view at an odd offset)"
    if not fr._compiled(v):
        return "Gluon kernels need a GPU (no interpreter)"
    if torch.cuda.get_device_capability(v.device)[0] != 9:
        return "the Gluon local pass is written for Hopper (sm_90)"
    return None


if gluon is not None:
    from .gluon_scan import _rcp  # one rcp.approx.ftz.f32

    @gluon.jit
    def _ex2(x):
        return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32,
                                         is_pure=True, pack=1)

    @gluon.jit
    def _butterfly(a, b, ASM: gl.constexpr):
        return gl.inline_asm_elementwise(ASM, "=r,r,r", [a, b], dtype=gl.float32, is_pure=True, pack=1)

    @gluon.jit
    def _plus_lane(x, ASM: gl.constexpr):
        return x + gl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=gl.float32, is_pure=True, pack=1)

    @gluon.jit
    def _prefetch(p):
        gl.inline_asm_elementwise("prefetch.global.L1 [$1];\n\tmov.u32 $0, 0;", "=r,l", [p], dtype=gl.int32,
                                  is_pure=False, pack=1)

    @gluon.jit
    def _prefetch_l2(p):
        gl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [p], dtype=gl.int32,
                                  is_pure=False, pack=1)

    @gluon.jit
    def _prefetch_to(p, STAGED: gl.constexpr, L2STAGED: gl.constexpr, L2ALL: gl.constexpr):
        """Ask for the lines at ``p``: nothing where they are ``STAGED`` (copied to shared memory later), unless
        ``L2STAGED`` asks for them in L2; in L2 with ``L2ALL``; in L1 otherwise."""
        if STAGED:
            if L2STAGED:
                _prefetch_l2(p)
        elif L2ALL:
            _prefetch_l2(p)
        else:
            _prefetch(p)

    @gluon.jit
    def _prefetch_state_l2(p_m, p_i, N: gl.constexpr):
        """Ask for the 4 channels of ``M`` and ``I`` at ``p_m``, ``p_i`` (``4 N`` float32 each, contiguous) in L2:
        each lane one 128-byte line of each, or half of one."""
        LT: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        o = gl.arange(0, 32, layout=LT) * (4 * N // 32)
        _prefetch_l2(p_m + o)
        _prefetch_l2(p_i + o)

    @gluon.jit
    def _split4(x):
        """An ``[N]`` tensor as each lane's 4 consecutive states: four ``[N / 4]`` tensors (no data moved)."""
        y = gl.reshape(x, [x.shape[0] // 4, 2, 2])
        a, b = gl.split(y)
        x0, x2 = gl.split(a)
        x1, x3 = gl.split(b)
        return x0, x1, x2, x3

    @gluon.jit
    def _lane_dot(x, w):
        """``sum`` over each lane's 4 states of ``x w`` as one FFMA chain: ``[N / 4]``, lane ``l``'s in lane ``l``."""
        x0, x1, x2, x3 = _split4(x)
        w0, w1, w2, w3 = _split4(w)
        return x0 * w0 + x1 * w1 + x2 * w2 + x3 * w3

    @gluon.jit
    def _lane_sum(x):
        x0, x1, x2, x3 = _split4(x)
        return x0 + x1 + x2 + x3

    @gluon.jit
    def _alloc_state(N: gl.constexpr):
        """Shared buffers for one state: ``M`` and ``I`` of 4 channels, 8 buffers (separate allocations, so that
        storing one does not wait on a barrier after the other)."""
        SH: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        return (gl.allocate_shared_memory(gl.float32, [N], SH), gl.allocate_shared_memory(gl.float32, [N], SH),
                gl.allocate_shared_memory(gl.float32, [N], SH), gl.allocate_shared_memory(gl.float32, [N], SH),
                gl.allocate_shared_memory(gl.float32, [N], SH), gl.allocate_shared_memory(gl.float32, [N], SH),
                gl.allocate_shared_memory(gl.float32, [N], SH), gl.allocate_shared_memory(gl.float32, [N], SH))

    @gluon.jit
    def _slots(N: gl.constexpr, SEG: gl.constexpr):
        gl.static_assert(SEG == 2 or SEG == 4 or SEG == 8, "SEG is 2, 4 or 8")
        if SEG == 2:
            return (_alloc_state(N), _alloc_state(N))
        elif SEG == 4:
            return (_alloc_state(N), _alloc_state(N), _alloc_state(N), _alloc_state(N))
        else:
            return (_alloc_state(N), _alloc_state(N), _alloc_state(N), _alloc_state(N),
                    _alloc_state(N), _alloc_state(N), _alloc_state(N), _alloc_state(N))

    @gluon.jit
    def _store_shared(bufs, st):
        for c in gl.static_range(8):
            bufs[c].store(st[c])

    @gluon.jit
    def _load_shared(bufs, L: gl.constexpr):
        return (bufs[0].load(L), bufs[1].load(L), bufs[2].load(L), bufs[3].load(L),
                bufs[4].load(L), bufs[5].load(L), bufs[6].load(L), bufs[7].load(L))

    @gluon.jit
    def _load_state(p_m, p_i, o_n, N: gl.constexpr):
        """``(M, I)`` of 4 channels from ``[4, N]`` rows at ``p_m``, ``p_i``."""
        return (gl.load(p_m + o_n), gl.load(p_m + N + o_n), gl.load(p_m + 2 * N + o_n), gl.load(p_m + 3 * N + o_n),
                gl.load(p_i + o_n), gl.load(p_i + N + o_n), gl.load(p_i + 2 * N + o_n), gl.load(p_i + 3 * N + o_n))

    @gluon.jit
    def _store_state(p_m, p_i, o_n, st, N: gl.constexpr):
        for c in gl.static_range(4):
            gl.store(p_m + c * N + o_n, st[c])
            gl.store(p_i + c * N + o_n, st[4 + c])

    @gluon.jit
    def _channels(p, valid):
        """The program's 4 channels of a ``[.., P]`` row at ``p`` (8- or 16-byte aligned), as float32 scalars from
        one vector load (0 for an invalid token, whose ``p`` the caller keeps inside the sequence)."""
        if p.dtype.element_ty == gl.bfloat16:
            x0, x1, x2, x3 = gl.inline_asm_elementwise(
                "{ .reg .b32 a, b; ld.global.nc.v2.b32 {a, b}, [$4]; shl.b32 $0, a, 16; and.b32 $1, a, 0xffff0000; "
                "shl.b32 $2, b, 16; and.b32 $3, b, 0xffff0000; }", "=r,=r,=r,=r,l", [p],
                dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True, pack=1)
        elif p.dtype.element_ty == gl.float16:
            x0, x1, x2, x3 = gl.inline_asm_elementwise(
                "{ .reg .b16 h0, h1, h2, h3; ld.global.nc.v4.b16 {h0, h1, h2, h3}, [$4]; cvt.f32.f16 $0, h0; "
                "cvt.f32.f16 $1, h1; cvt.f32.f16 $2, h2; cvt.f32.f16 $3, h3; }", "=r,=r,=r,=r,l", [p],
                dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True, pack=1)
        else:
            x0, x1, x2, x3 = gl.inline_asm_elementwise(
                "ld.global.nc.v4.f32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l", [p],
                dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True, pack=1)
        return (gl.where(valid, x0, 0.0), gl.where(valid, x1, 0.0), gl.where(valid, x2, 0.0),
                gl.where(valid, x3, 0.0))

    @gluon.jit
    def _rows_view(buf, R: gl.constexpr, N: gl.constexpr):
        """``[R, N]`` rows in shared memory viewed with a row's layout, so that ``.index(r)`` is row ``r``."""
        SR: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        if PUBLIC_REINTERPRET:
            return buf.reinterpret(buf.dtype, [R, N], SR)
        else:
            return buf._reinterpret(buf.dtype, [R, N], SR)

    @gluon.jit
    def _staged_channels(rows, r):
        """The program's 4 channels of row ``r`` of ``[BS, 4]`` staged values, gains or output gradients, as float32
        scalars (every lane reads the same 16 bytes, or 8 of a 16-bit copy that ``WIDEN`` did not widen)."""
        LB: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])
        x = rows.index(r).load(LB).to(gl.float32)
        a, b = gl.split(gl.reshape(x, [1, 2, 2]))  # [1, 2] each: (x0, x2), (x1, x3)
        x0, x2 = gl.split(a)
        x1, x3 = gl.split(b)
        # the sums over one element are the elements (no instruction)
        return gl.sum(x0, axis=0), gl.sum(x1, axis=0), gl.sum(x2, axis=0), gl.sum(x3, axis=0)

    @gluon.jit
    def _staged_scalar(rows, r):
        """Row ``r`` of ``[BS, 1]`` staged decays, as a float32 scalar."""
        LB: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        return gl.sum(rows.index(r).load(LB).to(gl.float32), axis=0)

    @gluon.jit
    def _row(rows, r, p, valid, o_n, STAGE: gl.constexpr):
        """A key or query row (``N`` values, lane ``l`` holding ``4 l .. 4 l + 3``) as float32: with ``STAGE`` row
        ``r`` of the block's copy in shared memory (zero where the token is not valid), else from ``p``."""
        if STAGE:
            x = rows.index(r).load(o_n.type.layout)
        else:
            x = gl.load(p + o_n, mask=o_n < gl.where(valid, o_n.shape[0], 0), other=0)
        return x.to(gl.float32)

    @gluon.jit
    def _token(v, k, g, beta, tok, valid, t_last, i_h, i_g, c0, o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr,
               N: gl.constexpr, USE_BETA: gl.constexpr, rows=0, r=0, STAGE: gl.constexpr = 0):
        """Key, decay, values, gains and log2 decay of token ``tok`` (the identity update where not ``valid``); with
        ``STAGE`` its key is row ``r`` of the block's staged rows ``rows`` (from ``STAGE`` 2 its values and gains,
        from 3 its decay)."""
        b_k = _row(rows[0] if STAGE else 0, r, k + (tok * G + i_g) * N, valid, o_n, STAGE)
        if STAGE >= 3:
            b_l = _staged_scalar(rows[4], r) * LOG2E
        else:
            b_l = gl.load(g + tok * H + i_h, mask=valid, other=0).to(gl.float32) * LOG2E
        b_a = _ex2(b_l)
        if STAGE >= 2:
            vv = _staged_channels(rows[2], r)
            if USE_BETA:
                bb = _staged_channels(rows[3], r)
            else:
                bb = vv
        else:
            o_c = (gl.minimum(tok, t_last) * H + i_h) * P + c0
            vv = _channels(v + o_c, valid)
            if USE_BETA:
                bb = _channels(beta + o_c, valid)
            else:
                bb = vv
        return b_k, b_a, vv, bb, b_l

    @gluon.jit
    def _update(st, b_k, b_a, vv, bb, b_ip, USE_BETA: gl.constexpr):
        """One step of both recurrences (``fused_recurrent._update``'s operations)."""
        b_c = (1 - b_a) * b_ip
        b_kk = b_k * b_k
        m0, m1, m2, m3, i0, i1, i2, i3 = st
        m0 = m0 * b_a + vv[0] * b_k
        m1 = m1 * b_a + vv[1] * b_k
        m2 = m2 * b_a + vv[2] * b_k
        m3 = m3 * b_a + vv[3] * b_k
        if USE_BETA:
            i0 = i0 * b_a + (bb[0] * b_kk + b_c)
            i1 = i1 * b_a + (bb[1] * b_kk + b_c)
            i2 = i2 * b_a + (bb[2] * b_kk + b_c)
            i3 = i3 * b_a + (bb[3] * b_kk + b_c)
        else:
            i0, i1, i2, i3 = i0 * b_a + b_c, i1 * b_a + b_c, i2 * b_a + b_c, i3 * b_a + b_c
        return (m0, m1, m2, m3, i0, i1, i2, i3)

    @gluon.jit
    def _step(st, v, k, g, beta, b_ip, tok, valid, t_last, i_h, i_g, c0, o_n, H: gl.constexpr, G: gl.constexpr,
              P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr, rows=0, r=0, STAGE: gl.constexpr = 0):
        b_k, b_a, vv, bb, b_l = _token(v, k, g, beta, tok, valid, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA,
                                       rows, r, STAGE)
        return _update(st, b_k, b_a, vv, bb, b_ip, USE_BETA)

    @gluon.jit
    def _walk_update(st, x, b_e, RESC: gl.constexpr, USE_BETA: gl.constexpr):
        """Pass B's update of the state ``st = (M, J)`` (``J = I - I_prior``) by token ``x`` (:func:`_token`'s
        tuple). ``RESC``: in rescaled states, ``M' = M / A`` and ``J' = J / A`` with ``A = 1 / b_e`` the decay from
        the block start to this token, one FFMA per state (``M' += v (k / A)``, ``J' += beta (k^2 / A)``); plainly
        otherwise (two per state)."""
        b_k, b_a, vv, bb, b_l = x
        m0, m1, m2, m3, j0, j1, j2, j3 = st
        if RESC:
            b_ke = b_k * b_e
            m0, m1, m2, m3 = m0 + vv[0] * b_ke, m1 + vv[1] * b_ke, m2 + vv[2] * b_ke, m3 + vv[3] * b_ke
            if USE_BETA:
                b_kk = b_k * b_ke
                j0, j1, j2, j3 = j0 + bb[0] * b_kk, j1 + bb[1] * b_kk, j2 + bb[2] * b_kk, j3 + bb[3] * b_kk
        else:
            m0 = m0 * b_a + vv[0] * b_k
            m1 = m1 * b_a + vv[1] * b_k
            m2 = m2 * b_a + vv[2] * b_k
            m3 = m3 * b_a + vv[3] * b_k
            if USE_BETA:
                b_kk = b_k * b_k
                j0, j1, j2, j3 = j0 * b_a + bb[0] * b_kk, j1 * b_a + bb[1] * b_kk, j2 * b_a + bb[2] * b_kk, \
                    j3 * b_a + bb[3] * b_kk
            else:
                j0, j1, j2, j3 = j0 * b_a, j1 * b_a, j2 * b_a, j3 * b_a
        return (m0, m1, m2, m3, j0, j1, j2, j3)

    @gluon.jit
    def _scale_after(b_s, x, RESC: gl.constexpr):
        """The log2 scale after token ``x`` from the one before it (``RESC``; it stays 0 in plain walks) and its
        ``2^s``, computed as the token's inputs arrive, so that the exponential is off the states' chain."""
        if RESC:
            b_s = b_s - x[4]
        return b_s, _ex2(b_s)

    @gluon.jit
    def _walk(slots, st, b_s, v, k, g, beta, t_b, ne, t_last, i_h, i_g, c0, o_n, x0, rows, SEG: gl.constexpr,
              H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr,
              PIPE: gl.constexpr, STAGE: gl.constexpr, RESC: gl.constexpr):
        """Pass B's walk from the block start ``st = (M, J)`` (log2 scale ``b_s``, 0) over the ``x0`` tokens before a
        segment, then over the segment's ``SEG`` tokens, the state before each stored in ``slots`` (rescaled with
        ``RESC``). Returns the state after the segment and the ``SEG + 1`` log2 scales of the slots' states and of
        it."""
        if PIPE:  # each token's inputs (and its scale) loaded while the token before it is computed
            x = _token(v, k, g, beta, t_b, 0 < ne, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA, rows, 0, STAGE)
            b_n, b_e = _scale_after(b_s, x, RESC)
            for s in range(x0):
                xn = _token(v, k, g, beta, t_b + s + 1, s + 1 < ne, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA,
                            rows, s + 1, STAGE)
                b_nn, b_en = _scale_after(b_n, xn, RESC)
                st = _walk_update(st, x, b_e, RESC, USE_BETA)
                b_s = b_n
                x, b_n, b_e = xn, b_nn, b_en
            scales = (b_s,)
            _store_shared(slots[0], st)
            for s in gl.static_range(SEG):
                if s + 1 < SEG:
                    xn = _token(v, k, g, beta, t_b + x0 + s + 1, x0 + s + 1 < ne, t_last, i_h, i_g, c0, o_n,
                                H, G, P, N, USE_BETA, rows, x0 + s + 1, STAGE)
                    b_nn, b_en = _scale_after(b_n, xn, RESC)
                st = _walk_update(st, x, b_e, RESC, USE_BETA)
                b_s = b_n
                scales = scales + (b_s,)
                if s + 1 < SEG:
                    _store_shared(slots[s + 1], st)
                    x, b_n, b_e = xn, b_nn, b_en
        else:
            for s in range(x0):
                x = _token(v, k, g, beta, t_b + s, s < ne, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA, rows, s,
                           STAGE)
                b_s, b_e = _scale_after(b_s, x, RESC)
                st = _walk_update(st, x, b_e, RESC, USE_BETA)
            scales = (b_s,)
            _store_shared(slots[0], st)
            for s in gl.static_range(SEG):
                x = _token(v, k, g, beta, t_b + x0 + s, x0 + s < ne, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA,
                           rows, x0 + s, STAGE)
                b_s, b_e = _scale_after(b_s, x, RESC)
                st = _walk_update(st, x, b_e, RESC, USE_BETA)
                scales = scales + (b_s,)
                if s + 1 < SEG:
                    _store_shared(slots[s + 1], st)
        return st, scales

    @gluon.jit
    def _advance_block(st, v, k, g, beta, b_ip, tok0, t_last, i_h, i_g, c0, o_n, H: gl.constexpr, G: gl.constexpr,
                       P: gl.constexpr, N: gl.constexpr, BS: gl.constexpr, USE_BETA: gl.constexpr,
                       RESCALE: gl.constexpr):
        """The state after the ``BS`` tokens from ``tok0`` (a whole block of pass A). ``RESCALE``: where the
        block's log decays' magnitudes sum to at most ``fused_recurrent.RESCALE_TAU`` (one uniform test), in rescaled
        states as ``fused_recurrent._rescaled_block`` (``M' = M / A``, ``J' = (I - I_prior) / A``: one FFMA per
        state and token), scaled back at the end; plainly otherwise."""
        if RESCALE:  # a constexpr test first (Triton 3.6 fails to compile a branch on a constant False here)
            if _block_fits(g, 0, tok0, BS, i_h, H, BS, 0):  # a whole block: every token valid
                m0, m1, m2, m3, i0, i1, i2, i3 = st
                i0, i1, i2, i3 = i0 - b_ip, i1 - b_ip, i2 - b_ip, i3 - b_ip
                b_s = b_ip * 0
                for s in gl.static_range(BS):
                    tok = tok0 + s
                    b_k = gl.load(k + (tok * G + i_g) * N + o_n).to(gl.float32)
                    b_s -= gl.load(g + tok * H + i_h).to(gl.float32)
                    vv = _channels(v + (tok * H + i_h) * P + c0, True)
                    b_ke = b_k * _ex2(b_s * LOG2E)
                    m0, m1, m2, m3 = m0 + vv[0] * b_ke, m1 + vv[1] * b_ke, m2 + vv[2] * b_ke, m3 + vv[3] * b_ke
                    if USE_BETA:
                        bb = _channels(beta + (tok * H + i_h) * P + c0, True)
                        b_kk = b_k * b_ke
                        i0, i1, i2, i3 = i0 + bb[0] * b_kk, i1 + bb[1] * b_kk, i2 + bb[2] * b_kk, i3 + bb[3] * b_kk
                b_w = _ex2(-b_s * LOG2E)
                st = (m0 * b_w, m1 * b_w, m2 * b_w, m3 * b_w,
                      i0 * b_w + b_ip, i1 * b_w + b_ip, i2 * b_w + b_ip, i3 * b_w + b_ip)
            else:
                st = _plain_block(st, v, k, g, beta, b_ip, tok0, t_last, i_h, i_g, c0, o_n, H, G, P, N, BS, USE_BETA)
        else:
            st = _plain_block(st, v, k, g, beta, b_ip, tok0, t_last, i_h, i_g, c0, o_n, H, G, P, N, BS, USE_BETA)
        return st

    @gluon.jit
    def _plain_block(st, v, k, g, beta, b_ip, tok0, t_last, i_h, i_g, c0, o_n, H: gl.constexpr, G: gl.constexpr,
                     P: gl.constexpr, N: gl.constexpr, BS: gl.constexpr, USE_BETA: gl.constexpr):
        """Pass A's block of ``BS`` tokens from ``tok0`` in plain states (:func:`_update`)."""
        for s in gl.static_range(BS):
            st = _step(st, v, k, g, beta, b_ip, tok0 + s, True, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA)
        return st

    @gluon.jit
    def _reverse(st, s_t, sp, s_p, ad, b_an, b_ip, v, k, q, g, beta, dy, dk, dq, tok, valid, t_last, i_h, i_g, c0,
                 o_n, H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr,
                 rows, r, STAGE: gl.constexpr, SCALED: gl.constexpr = True):
        """The reverse step of token ``tok`` from the state after it ``st``, the state before it ``sp`` (each
        ``(M, J)`` rescaled by ``2^s``, ``s_t`` and ``s_p``: :func:`_walk`) and the adjoints ``ad = (dM, dI)`` of
        the step after (decay ``b_an``): ``fused_recurrent._chained_step``'s operations. ``M / I = M' / D`` with
        ``D = J' + 2^s I_prior``, so the output gradient enters scaled by ``2^s``, and the decay gradient's sum over
        the rescaled previous state is scaled back once. Adds ``dq``, ``dk``; returns the adjoints, ``a_t`` and the
        lane partials of ``dv``, ``dbeta`` (4 channels each) and of the decay gradient."""
        b_k, b_a, vv, bb, b_l = _token(v, k, g, beta, tok, valid, t_last, i_h, i_g, c0, o_n, H, G, P, N, USE_BETA,
                                       rows, r, STAGE)
        b_q = _row(rows[1] if STAGE else 0, r, q + (tok * G + i_g) * N, valid, o_n, STAGE)
        tc = gl.minimum(tok, t_last)
        if STAGE >= 3:
            yy = _staged_channels(rows[5], r)
        else:
            yy = _channels(dy + (tc * H + i_h) * P + c0, valid)
        if SCALED:  # the scales of rescaled walks (2^0 = 1 where a block walked plainly)
            b_e = _ex2(s_t)
            b_pe = b_ip * b_e
            ye = (yy[0] * b_e, yy[1] * b_e, yy[2] * b_e, yy[3] * b_e)
            b_w = b_a * _ex2(-s_p)
        else:  # every walk plain (WALK_RESCALE off): no scale
            b_pe = b_ip
            ye = yy
            b_w = b_a
        m0, m1, m2, m3, i0, i1, i2, i3 = st
        p0, p1, p2, p3, j0, j1, j2, j3 = sp
        dm0, dm1, dm2, dm3, di0, di1, di2, di3 = ad
        r0, r1, r2, r3 = _rcp(i0 + b_pe), _rcp(i1 + b_pe), _rcp(i2 + b_pe), _rcp(i3 + b_pe)
        u0, u1, u2, u3 = m0 * r0, m1 * r1, m2 * r2, m3 * r3
        g0 = ye[0] * b_q * r0
        g1 = ye[1] * b_q * r1
        g2 = ye[2] * b_q * r2
        g3 = ye[3] * b_q * r3
        dm0, dm1, dm2, dm3 = dm0 * b_an + g0, dm1 * b_an + g1, dm2 * b_an + g2, dm3 * b_an + g3
        di0, di1, di2, di3 = di0 * b_an - g0 * u0, di1 * b_an - g1 * u1, di2 * b_an - g2 * u2, di3 * b_an - g3 * u3
        b_dq = u0 * yy[0] + u1 * yy[1] + u2 * yy[2] + u3 * yy[3]
        b_dk = dm0 * vv[0] + dm1 * vv[1] + dm2 * vv[2] + dm3 * vv[3]
        l_dv = (_lane_dot(dm0, b_k), _lane_dot(dm1, b_k), _lane_dot(dm2, b_k), _lane_dot(dm3, b_k))
        # the decay gradient's sum as two chains of four products (_row_dot2 runs one of eight: the same terms,
        # rounded in another order; the kernel as timed)
        b_g = dm0 * p0 + di0 * j0 + dm1 * p1 + di1 * j1
        b_g += dm2 * p2 + di2 * j2 + dm3 * p3 + di3 * j3
        l_dg = b_w * _lane_sum(b_g)
        if USE_BETA:
            b_kk = b_k * b_k
            l_db = (_lane_dot(di0, b_kk), _lane_dot(di1, b_kk), _lane_dot(di2, b_kk), _lane_dot(di3, b_kk))
            b_dk += 2 * b_k * (di0 * bb[0] + di1 * bb[1] + di2 * bb[2] + di3 * bb[3])
        else:
            l_db = l_dv
        # unmasked (no branch): an invalid token's sums are zero (its value, gain, key, query and output gradient
        # are), added at the sequence's last token
        gl.atomic_add(dq + (tc * G + i_g) * N + o_n, b_dq, sem="relaxed")
        gl.atomic_add(dk + (tc * G + i_g) * N + o_n, b_dk, sem="relaxed")
        return (dm0, dm1, dm2, dm3, di0, di1, di2, di3), b_a, l_dv, l_db, l_dg

    @gluon.jit
    def _pair_outputs(dv, dbeta, dg, l_dv1, l_db1, l_dg1, l_dv2, l_db2, l_dg2, tok1, valid1, valid2, i_h, c0,
                      H: gl.constexpr, P: gl.constexpr, USE_BETA: gl.constexpr):
        """A pair's ``dv``, ``dbeta`` stored and decay gradients added from their lane partials
        (``fused_recurrent._pair_rows``, ``_pair_decay_grads``): lane bit 4 picks the token, bit 3 the gradient."""
        lane = gl.arange(0, 32, layout=l_dg1.type.layout)
        second = ((lane >> 4) & 1) == 1
        tok = tok1 + second.to(gl.int64)
        ok = gl.where(second, valid2, valid1)
        if USE_BETA:
            base = gl.where(((lane >> 3) & 1) == 1, dbeta, dv) + (tok * H + i_h) * P + c0
            m_row = ok & ((lane & 7) == 0)
        else:
            base = dv + (tok * H + i_h) * P + c0
            m_row = ok & ((lane & 15) == 0)
        for c in gl.static_range(4):
            if USE_BETA:
                s = _butterfly(_butterfly(l_dv1[c], l_dv2[c], BUTTERFLY16), _butterfly(l_db1[c], l_db2[c], BUTTERFLY16),
                               BUTTERFLY8)
            else:
                s = _plus_lane(_butterfly(l_dv1[c], l_dv2[c], BUTTERFLY16), XOR8)
            s = _plus_lane(_plus_lane(_plus_lane(s, XOR4), XOR2), XOR1)
            gl.store(base + c, s.to(dv.dtype.element_ty), mask=m_row)
        s = _butterfly(l_dg1, l_dg2, BUTTERFLY16)
        s = _plus_lane(_plus_lane(_plus_lane(_plus_lane(s, XOR8), XOR4), XOR2), XOR1)
        gl.atomic_add(dg + tok * H + i_h, s, mask=ok & ((lane & 15) == 0), sem="relaxed")

    @gluon.jit
    def _prefetch_block(v, k, q, g, beta, dy, tok0, t_last, i_h, i_g, c0, H: gl.constexpr, G: gl.constexpr,
                        P: gl.constexpr, N: gl.constexpr, BS: gl.constexpr, USE_BETA: gl.constexpr,
                        READOUT: gl.constexpr, STAGED: gl.constexpr = 0, L2STAGED: gl.constexpr = False,
                        L2ALL: gl.constexpr = False):
        """``fused_recurrent._prefetch_block``: the ``BS`` tokens from ``tok0`` (clamped to ``t_last``) asked for in
        L1, their float32 key rows (4 lines each), value, gain and decay lines, and with ``READOUT`` their query
        rows and output-gradient lines; less what ``STAGED`` copies to shared memory (the key and query rows from 1,
        the values and gains from 2, the decays and output gradients from 3), which ``L2STAGED`` asks for in L2
        instead; ``L2ALL``: everything in L2 rather than L1."""
        LR: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [1, 1], [1, 0])
        LT: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        o_r = gl.minimum(tok0 + gl.arange(0, BS, layout=gl.SliceLayout(1, LR)), t_last)
        o_row = ((o_r * G + i_g) * N)[:, None] + (gl.arange(0, 4, layout=gl.SliceLayout(0, LR)) * 32)[None, :]
        _prefetch_to(k + o_row, STAGED >= 1, L2STAGED, L2ALL)
        o_t = gl.minimum(tok0 + gl.arange(0, BS, layout=LT), t_last)
        o_c = (o_t * H + i_h) * P + c0
        _prefetch_to(v + o_c, STAGED >= 2, L2STAGED, L2ALL)
        if USE_BETA:
            _prefetch_to(beta + o_c, STAGED >= 2, L2STAGED, L2ALL)
        _prefetch_to(g + o_t * H + i_h, STAGED >= 3, L2STAGED, L2ALL)
        if READOUT:
            _prefetch_to(q + o_row, STAGED >= 1, L2STAGED, L2ALL)
            _prefetch_to(dy + o_c, STAGED >= 3, L2STAGED, L2ALL)

    @gluon.jit
    def _segment(slots, ad, b_an, p_m0, p_i0, t_b, ne, t_last, b_ip, fits, v, k, q, g, beta, dy, dv, dk, dq, dg,
                 dbeta, i_h, i_g, c0, o_n, x0, rows, widen_y, L: gl.constexpr, SEG: gl.constexpr, H: gl.constexpr,
                 G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr, PIPE: gl.constexpr,
                 STAGE: gl.constexpr, WIDEN: gl.constexpr, WALK_RESCALE: gl.constexpr):
        """Pass B over the ``SEG`` tokens from ``x0`` of the block whose start is at ``p_m0``, ``p_i0`` and first
        token ``t_b`` (``ne`` of its tokens valid): the block start walked to the segment (rescaled where ``fits``),
        the state before each of the segment's tokens stored in ``slots``, then its pairs reversed from the adjoints
        ``ad`` (decay ``b_an``) of the token after it. Returns the adjoints and decay of the segment's first token.
        With ``STAGE`` the block's staged inputs are read from ``rows`` in shared memory (the second copy group,
        queries and output gradients, waited for before the first reverse step)."""
        m0, m1, m2, m3, i0, i1, i2, i3 = _load_state(p_m0, p_i0, o_n, N)
        st = (m0, m1, m2, m3, i0 - b_ip, i1 - b_ip, i2 - b_ip, i3 - b_ip)
        if WALK_RESCALE:  # a constexpr test first (Triton 3.6 fails to compile some kernels that branch on a
            # constant False)
            if fits:
                st, sc = _walk(slots, st, b_ip * 0, v, k, g, beta, t_b, ne, t_last, i_h, i_g, c0, o_n, x0, rows, SEG,
                               H, G, P, N, USE_BETA, PIPE, STAGE, True)
            else:
                st, sc = _walk(slots, st, b_ip * 0, v, k, g, beta, t_b, ne, t_last, i_h, i_g, c0, o_n, x0, rows, SEG,
                               H, G, P, N, USE_BETA, PIPE, STAGE, False)
        else:
            st, sc = _walk(slots, st, b_ip * 0, v, k, g, beta, t_b, ne, t_last, i_h, i_g, c0, o_n, x0, rows, SEG, H, G,
                           P, N, USE_BETA, PIPE, STAGE, False)
        if STAGE:
            async_copy.wait_group(0)
            if STAGE >= 3:
                if WIDEN and dy.dtype.element_ty != gl.float32:  # the kernel's widen_y: (16-bit copy, float32 copy)
                    LV: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [1, 1], [1, 0])
                    widen_y[1].store(widen_y[0].load(LV).to(gl.float32))
        for pr in gl.static_range(SEG // 2):  # the pair (tok2 - 1, tok2), from the segment's end
            tok2 = t_b + x0 + SEG - 1 - 2 * pr
            valid1 = x0 + SEG - 2 - 2 * pr < ne
            valid2 = x0 + SEG - 1 - 2 * pr < ne
            if pr > 0:
                st = _load_shared(slots[SEG - 2 * pr], L)
            sp = _load_shared(slots[SEG - 1 - 2 * pr], L)
            ad, b_an, l_dv2, l_db2, l_dg2 = _reverse(st, sc[SEG - 2 * pr], sp, sc[SEG - 1 - 2 * pr], ad, b_an, b_ip,
                                                     v, k, q, g, beta, dy, dk, dq, tok2, valid2, t_last, i_h, i_g,
                                                     c0, o_n, H, G, P, N, USE_BETA, rows, x0 + SEG - 1 - 2 * pr, STAGE,
                                                     WALK_RESCALE)
            spp = _load_shared(slots[SEG - 2 - 2 * pr], L)
            ad, b_an, l_dv1, l_db1, l_dg1 = _reverse(sp, sc[SEG - 1 - 2 * pr], spp, sc[SEG - 2 - 2 * pr], ad, b_an,
                                                     b_ip, v, k, q, g, beta, dy, dk, dq, tok2 - 1, valid1, t_last,
                                                     i_h, i_g, c0, o_n, H, G, P, N, USE_BETA, rows,
                                                     x0 + SEG - 2 - 2 * pr, STAGE, WALK_RESCALE)
            _pair_outputs(dv, dbeta, dg, l_dv1, l_db1, l_dg1, l_dv2, l_db2, l_dg2, tok2 - 1, valid1, valid2, i_h, c0,
                          H, P, USE_BETA)
        return ad, b_an

    @gluon.jit
    def _block_fits(g, rows, tok0, ne, i_h, H: gl.constexpr, BS: gl.constexpr, STAGE: gl.constexpr):
        """Whether the block of ``BS`` tokens from ``tok0`` (``ne`` valid) can be walked in rescaled states (pass A;
        pass B's with ``WALK_RESCALE``): its log decays' magnitudes sum to at most ``fused_recurrent.RESCALE_TAU``
        (from the staged decays with ``STAGE`` 3)."""
        if STAGE >= 3:
            b_t = gl.abs(_staged_scalar(rows[4], 0))
            for s in gl.static_range(1, BS):
                b_t += gl.abs(_staged_scalar(rows[4], s))
        else:
            b_t = gl.abs(gl.load(g + tok0 * H + i_h).to(gl.float32))
            for s in gl.static_range(1, BS):
                b_t += gl.abs(gl.load(g + (tok0 + s) * H + i_h, mask=s < ne, other=0).to(gl.float32))
        return b_t <= TAU

    @gluon.jit
    def palimpsa_gluon_local_kernel(
        v, k, q, g, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li, dv, dk, dq, dg, dbeta, dm0, di0, dmT, diT,
        cu_seqlens, chunk_offsets, T, n_nh, n_work,
        H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, CT: gl.constexpr, BS: gl.constexpr,
        SEG: gl.constexpr, NSPLIT: gl.constexpr, USE_BETA: gl.constexpr, USE_INITIAL_STATE: gl.constexpr,
        USE_INITIAL_IMPORTANCE: gl.constexpr, IS_VARLEN: gl.constexpr, PREFETCH: gl.constexpr,
        RESCALE: gl.constexpr, PIPE: gl.constexpr, STAGE: gl.constexpr, L2PF: gl.constexpr = 0,
        WALK_RESCALE: gl.constexpr = False, WIDEN: gl.constexpr = True, WHOLE: gl.constexpr = False,
        USE_FINAL_STATE_GRADIENT: gl.constexpr = False,
    ):
        """Persistent, as ``chunked_bwd.palimpsa_bwd_local_kernel``: program ``p`` takes the work items ``p``,
        ``p + programs``, ... (channel block fastest, then the (sequence, head) pairs, then the split), each the
        chunks ``i_sp, i_sp + NSPLIT, ...`` of one (channel block, head), with one scratch slab of ``CT / BS - 1``
        states for all of them. ``WHOLE`` (``NSPLIT`` 1): a work item walks its sequence's chunks from the last,
        carrying the adjoints across them from the final-state gradient (``dmT``, ``diT``, with
        ``USE_FINAL_STATE_GRADIENT``), so its gradients are whole (no carry, no corrections) and only ``dM0``,
        ``dI0`` are stored besides."""
        L: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])
        NV: gl.constexpr = P // 4
        NSEG: gl.constexpr = BS // SEG
        gl.static_assert(BS % SEG == 0, "SEG divides BS")
        gl.static_assert(SEG % 2 == 0, "SEG holds whole pairs")
        pid = gl.program_id(0)
        o_sc = pid.to(gl.int64) * (CT // BS - 1) * 4 * N
        o_n = gl.arange(0, N, layout=L)
        b_ip = gl.load(ip).to(gl.float32)
        slots = _slots(N, SEG)
        if STAGE:  # the block's inputs, copied at its start in pass B (one copy each: [BS, N] rows, [BS, 4] channels,
            # [BS, 1] decays), read a row at a time through a view whose layout is a row's: rows = (keys, queries,
            # values, gains, decays, output gradients) as far as STAGE goes
            SC: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
            LC: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, 1], [1, 0])
            k_copy = gl.allocate_shared_memory(k.dtype.element_ty, [BS, N], SC)
            q_copy = gl.allocate_shared_memory(q.dtype.element_ty, [BS, N], SC)
            o_cr = gl.arange(0, BS, layout=gl.SliceLayout(1, LC))
            o_cn = gl.arange(0, N, layout=gl.SliceLayout(0, LC))
            rows = (_rows_view(k_copy, BS, N), _rows_view(q_copy, BS, N))
            if STAGE >= 2:  # and its 4 channels of values and gains ([BS, 4] each)
                LV: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [1, 1], [1, 0])
                v_copy = gl.allocate_shared_memory(v.dtype.element_ty, [BS, 4], SC)
                b_copy = gl.allocate_shared_memory(v.dtype.element_ty, [BS, 4], SC)
                o_vr = gl.arange(0, BS, layout=gl.SliceLayout(1, LV))
                o_vc = gl.arange(0, 4, layout=gl.SliceLayout(0, LV))
                if WIDEN and v.dtype.element_ty != gl.float32:  # 16-bit: widened once a block into float32 copies,
                    # so that each of the ~6 reads a token is one 16-byte load (call 1 of
                    # docs/bench/rescaled-walk-2026-11-28: unpacked at every read they cost 2.7 an element-token)
                    v_wide = gl.allocate_shared_memory(gl.float32, [BS, 4], SC)
                    b_wide = gl.allocate_shared_memory(gl.float32, [BS, 4], SC)
                    rows = rows + (_rows_view(v_wide, BS, 4), _rows_view(b_wide, BS, 4))
                else:
                    rows = rows + (_rows_view(v_copy, BS, 4), _rows_view(b_copy, BS, 4))
                if STAGE >= 3:  # and its decays ([BS, 1]) and output gradients ([BS, 4])
                    LG: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
                    g_copy = gl.allocate_shared_memory(g.dtype.element_ty, [BS, 1], SC)
                    y_copy = gl.allocate_shared_memory(dy.dtype.element_ty, [BS, 4], SC)
                    o_gr = gl.arange(0, BS, layout=gl.SliceLayout(1, LG))
                    o_g1 = gl.arange(0, 1, layout=gl.SliceLayout(0, LG))
                    if WIDEN and dy.dtype.element_ty != gl.float32:
                        y_wide = gl.allocate_shared_memory(gl.float32, [BS, 4], SC)
                        rows = rows + (_rows_view(g_copy, BS, 1), _rows_view(y_wide, BS, 4))
                        widen_y = (y_copy, y_wide)
                    else:
                        rows = rows + (_rows_view(g_copy, BS, 1), _rows_view(y_copy, BS, 4))
                        widen_y = 0
                else:
                    widen_y = 0
            else:
                widen_y = 0
        else:
            rows = 0
            widen_y = 0
        for work in range(pid, n_work, gl.num_programs(0)):
            i_sp = work // (NV * n_nh)
            i_v = work % NV
            i_nh = (work // NV) % n_nh
            i_n, i_h = i_nh // H, i_nh % H
            i_g = i_h // (H // G)
            c0 = i_v * 4
            if IS_VARLEN:
                bos = gl.load(cu_seqlens + i_n).to(gl.int64)
                T_n = (gl.load(cu_seqlens + i_n + 1).to(gl.int64) - bos).to(gl.int32)
                boc = gl.load(chunk_offsets + i_n).to(gl.int64)
            else:
                bos = i_n.to(gl.int64) * T
                T_n = T
                boc = i_n.to(gl.int64) * gl.cdiv(T, CT)
            t_last = bos + T_n - 1
            o_state = (i_nh.to(gl.int64) * P + c0) * N
            n_c = gl.cdiv(T_n, CT)
            # the adjoints of the state after the token being reversed, and that token's decay (WHOLE: from the
            # final-state gradient, carried across the chunks; otherwise zero at every chunk's end)
            if WHOLE and USE_FINAL_STATE_GRADIENT:
                ad = _load_state(dmT + o_state, diT + o_state, o_n, N)
            else:
                zero = gl.zeros([N], gl.float32, layout=L)
                ad = (zero, zero, zero, zero, zero, zero, zero, zero)
            b_an = b_ip * 0 + 1
            for i_x in range(i_sp, n_c, NSPLIT):
                if WHOLE:
                    i_c = n_c - 1 - i_x
                else:
                    i_c = i_x
                t0 = i_c * CT
                nb = gl.cdiv(gl.minimum(CT, T_n - t0), BS)
                o_ck = (((boc + i_c) * H + i_h) * P + c0) * N
                # pass A: the chunk forward again from its checkpoint, every BS-th state into the slab (block
                # j + 1 starts at slot j; block 0 at the checkpoint)
                st = _load_state(ck_m + o_ck, ck_i + o_ck, o_n, N)
                for j in range(nb - 1):
                    if PREFETCH:
                        _prefetch_block(v, k, q, g, beta, dy, bos + t0 + (j + 1) * BS, t_last, i_h, i_g, c0,
                                        H, G, P, N, BS, USE_BETA, False, L2ALL=(L2PF & 2) != 0)
                    st = _advance_block(st, v, k, g, beta, b_ip, bos + t0 + j * BS, t_last, i_h, i_g, c0, o_n,
                                        H, G, P, N, BS, USE_BETA, RESCALE)
                    _store_state(sc_m + o_sc + j * 4 * N, sc_i + o_sc + j * 4 * N, o_n, st, N)
                # pass B: blocks in reverse; in a block, segments in reverse, each walked from the block start
                # with the states before its tokens in shared memory, then its pairs reversed
                if not WHOLE:
                    zero = gl.zeros([N], gl.float32, layout=L)
                    ad = (zero, zero, zero, zero, zero, zero, zero, zero)
                    b_an = b_ip * 0 + 1
                for i_jr in range(nb):
                    j = nb - 1 - i_jr
                    tb = t0 + j * BS
                    ne = gl.minimum(BS, T_n - tb)
                    if j == 0:
                        p_m0, p_i0 = ck_m + o_ck, ck_i + o_ck
                    else:
                        p_m0, p_i0 = sc_m + o_sc + (j - 1) * 4 * N, sc_i + o_sc + (j - 1) * 4 * N
                    if STAGE:  # two groups of asynchronous copies (masked rows: zeros): what the walks read (keys,
                        # values, gains, decays), then what only the reverse steps read (queries, output gradients)
                        o_kq = ((gl.minimum(bos + tb + o_cr, t_last) * G + i_g) * N)[:, None] + o_cn[None, :]
                        row_ok = (o_cr < ne)[:, None]
                        _async_load(k_copy, k + o_kq, mask=row_ok)
                        if STAGE >= 2:
                            o_v = ((gl.minimum(bos + tb + o_vr, t_last) * H + i_h) * P + c0)[:, None] + o_vc[None, :]
                            v_ok = (o_vr < ne)[:, None]
                            _async_load(v_copy, v + o_v, mask=v_ok)
                            if USE_BETA:
                                _async_load(b_copy, beta + o_v, mask=v_ok)
                            if STAGE >= 3:
                                o_g = (gl.minimum(bos + tb + o_gr, t_last) * H + i_h)[:, None] + o_g1[None, :]
                                _async_load(g_copy, g + o_g, mask=(o_gr < ne)[:, None])
                        async_copy.commit_group()
                        _async_load(q_copy, q + o_kq, mask=row_ok)
                        if STAGE >= 3:
                            _async_load(y_copy, dy + o_v, mask=v_ok)
                        async_copy.commit_group()
                    if L2PF & 4:  # the next block's start state (4 channels of M and I, 2 KB each) in L2
                        if j > 1:
                            _prefetch_state_l2(sc_m + o_sc + (j - 2) * 4 * N, sc_i + o_sc + (j - 2) * 4 * N, N)
                        elif j == 1:
                            _prefetch_state_l2(ck_m + o_ck, ck_i + o_ck, N)
                    if PREFETCH:
                        if j > 0:
                            _prefetch_block(v, k, q, g, beta, dy, bos + tb - BS, t_last, i_h, i_g, c0,
                                            H, G, P, N, BS, USE_BETA, True, STAGE, L2STAGED=(L2PF & 1) != 0,
                                            L2ALL=(L2PF & 2) != 0)
                    if STAGE:
                        async_copy.wait_group(1)
                        if STAGE >= 2:
                            if WIDEN and v.dtype.element_ty != gl.float32:
                                v_wide.store(v_copy.load(LV).to(gl.float32))
                                if USE_BETA:
                                    b_wide.store(b_copy.load(LV).to(gl.float32))
                    fits = False  # read only with WALK_RESCALE
                    if WALK_RESCALE:
                        fits = _block_fits(g, rows, bos + tb, ne, i_h, H, BS, STAGE)
                    for i_gr in range(NSEG):  # a loop (unrolled, the segments measured slower: call 4)
                        ad, b_an = _segment(slots, ad, b_an, p_m0, p_i0, bos + tb, ne, t_last, b_ip, fits, v, k, q, g,
                                            beta, dy, dv, dk, dq, dg, dbeta, i_h, i_g, c0, o_n,
                                            (NSEG - 1 - i_gr) * SEG, rows, widen_y, L, SEG, H, G, P, N, USE_BETA,
                                            PIPE, STAGE, WIDEN, WALK_RESCALE)
                # the chunk's local adjoint of the state before its first token (chunked_bwd's local kernel)
                if not WHOLE:
                    if i_c > 0:
                        o_l = (((gl.maximum(boc - i_n, 0) + i_c - 1) * H + i_h) * P + c0) * N
                        for c in gl.static_range(4):
                            gl.store(lm + o_l + c * N + o_n, ad[c] * b_an)
                            gl.store(li + o_l + c * N + o_n, ad[4 + c] * b_an)
                    else:
                        _store_initial(dm0, di0, o_state, o_n, ad, b_an, N, USE_INITIAL_STATE,
                                       USE_INITIAL_IMPORTANCE)
            if WHOLE:  # the adjoint leaving the first chunk: the initial states' gradients, whole
                _store_initial(dm0, di0, o_state, o_n, ad, b_an, N, USE_INITIAL_STATE, USE_INITIAL_IMPORTANCE)

    @gluon.jit
    def _store_initial(dm0, di0, o_state, o_n, ad, b_an, N: gl.constexpr, USE_INITIAL_STATE: gl.constexpr,
                       USE_INITIAL_IMPORTANCE: gl.constexpr):
        """The adjoint of the state before a sequence's first token, ``ad`` carried back by its decay ``b_an``,
        into ``dM0``, ``dI0`` where the sequence had an initial state."""
        if USE_INITIAL_STATE:
            for c in gl.static_range(4):
                gl.store(dm0 + o_state + c * N + o_n, ad[c] * b_an)
        if USE_INITIAL_IMPORTANCE:
            for c in gl.static_range(4):
                gl.store(di0 + o_state + c * N + o_n, ad[4 + c] * b_an)


POINTERS = ("v", "k", "q", "g", "beta", "ip", "ck_m", "ck_i", "dy", "sc_m", "sc_i", "lm", "li", "dv", "dk", "dq",
            "dg", "dbeta", "dm0", "di0", "dmT", "diT", "cu_seqlens", "chunk_offsets")


def shared_bytes(seg: int, state_size: int = 128, *, stage: int = 0, block: int = 8, row_bytes: int = 4,
                 value_bytes: int = 2, decay_bytes: int = 4, use_beta: bool = True, widen: bool = True) -> int:
    """Shared memory a program holds: ``seg`` slots of ``M`` and ``I`` for 4 channels, float32, and what ``STAGE``
    copies of a block of ``block`` tokens: its key and query rows (``row_bytes`` an element), from 2 its 4 channels
    of values and gains (``value_bytes``), from 3 its decays and output gradients; with ``widen`` 16-bit values,
    gains (with beta) and output gradients also have float32 copies (``WIDEN``)."""
    staged = 0
    wide = widen and value_bytes < 4
    if stage >= 1:
        staged += 2 * block * state_size * row_bytes
    if stage >= 2:
        staged += (block * 4 * value_bytes + wide * block * 4 * 4) * (2 if use_beta else 1)
    if stage >= 3:
        staged += block * decay_bytes + block * 4 * value_bytes + wide * block * 4 * 4
    return seg * 8 * state_size * 4 + staged


def staging_level(stage: int, v: torch.Tensor, k: torch.Tensor, q: torch.Tensor, log_decay: torch.Tensor, beta,
                  dy) -> int:
    """The ``STAGE`` level these tensors allow (0-3, at most ``stage``). ``cp.async`` copies 4, 8 or 16 bytes, and
    Triton vectorises a copy only from a pointer it specialised as 16-byte aligned: so 16-bit values, gains or
    output gradients at another address stage the rows alone (1), 16-bit key or query rows at another address
    nothing (0), and decays other than float32 (2 bytes a token) stop at the rows (1, the faster of 1 and 2)."""
    stage = max(0, min(3, int(stage)))
    if any(t is not None and t.element_size() < 4 and t.data_ptr() % 16 for t in (k, q)):
        return 0
    if any(t is not None and t.element_size() < 4 and t.data_ptr() % 16 for t in (v, beta, dy)):
        return min(stage, 1)
    if stage == 3 and log_decay.dtype != torch.float32:
        return 1
    return stage


def resident_programs(registers: int, shared: int, *, sm_shared: int = 228 * 1024, reserved: int = 1024) -> int:
    """One-warp programs of ``registers`` a thread and ``shared`` bytes of dynamic shared memory that stay resident
    on one Hopper SM at once. Registers come from the file of one of the SM's 4 schedulers (16,384 each), in units
    of 256 a warp, so 169-224 registers give 2 warps a scheduler (8 an SM), 129-168 give 3 (12); each program also
    holds ``reserved`` bytes of the SM's 228 KB of shared memory, in units of 128 bytes. This is CUDA's occupancy
    rule for compute capability 9.0; that it is why call 11's ninth program ran as a second wave
    (docs/bench/gluon-auto-2026-11-28) is likely, not measured."""
    per_warp = -(-registers * 32 // 256) * 256
    by_registers = 4 * (16384 // per_warp)
    per_program = -(-(shared + reserved) // 128) * 128
    return min(by_registers, sm_shared // per_program, 32)


def l2_prefetch_bits(level: int, bits: int) -> int:
    """``L2PF`` at staging level ``level``: bit 4 (pass B's next start state in L2, timed at level 3) only where
    something is staged, since unstaged the kernel spills 8 bytes with it under Triton 3.9 (none under 3.5.1 and
    3.6)."""
    return int(bits) if level else int(bits) & ~4


def launch(v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li, dv, dk, dq, dg, dbeta, dm0, di0,
           cu_seqlens, offsets, length, n_nh, n_work, programs, *, chunk_size, block_size, seg, nsplit, prefetch,
           rescale, pipe, stage, use_initial_state, use_initial_importance, l2_prefetch=0, maxnreg=0,
           walk_rescale=False, widen=True, whole=False, dm_t=None, di_t=None):
    """The Gluon local pass, launched where ``chunked_bwd.chunked_backward`` would launch the Triton one, with
    ``stage`` lowered to what the tensors allow (``staging_level``) and ``l2_prefetch`` to what that level takes
    (``l2_prefetch_bits``); ``maxnreg`` caps its registers (0: ptxas's choice); ``walk_rescale``: pass B's walks in
    rescaled states where a block allows (``WALK_RESCALE``); ``widen``: 16-bit staged values, gains and output
    gradients widened to float32 once a block (``WIDEN``); ``whole`` (``nsplit`` 1): each work item walks its
    whole sequence with the adjoints carried across the chunks from ``dm_t``, ``di_t`` (the final-state gradient,
    both or neither), its gradients whole (``WHOLE``: no carry or corrections follow)."""
    if whole and nsplit != 1:
        raise ValueError(f"the Gluon local pass walks whole sequences with NSPLIT 1, not {nsplit}")
    level = staging_level(stage, v, k_l, q_l, log_decay, beta, dy)
    l2_prefetch = l2_prefetch_bits(level, l2_prefetch)
    palimpsa_gluon_local_kernel[(programs,)](
        v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li, dv, dk, dq, dg, dbeta, dm0, di0,
        dm_t, di_t, cu_seqlens, offsets, length, n_nh, n_work,
        H=v.shape[2], G=k_l.shape[2], P=v.shape[3], N=k_l.shape[3], CT=chunk_size, BS=block_size, SEG=seg,
        NSPLIT=nsplit, USE_BETA=beta is not None, USE_INITIAL_STATE=use_initial_state,
        USE_INITIAL_IMPORTANCE=use_initial_importance, IS_VARLEN=cu_seqlens is not None, PREFETCH=prefetch,
        RESCALE=rescale, PIPE=pipe, STAGE=level, L2PF=l2_prefetch, WALK_RESCALE=bool(walk_rescale),
        WIDEN=bool(widen), WHOLE=bool(whole), USE_FINAL_STATE_GRADIENT=bool(whole) and dm_t is not None,
        num_warps=1, **fr.FP_FUSION,
        **({"maxnreg": int(maxnreg)} if maxnreg else {}),
    )


def compile_kernel(*, dtype: str = "bf16", heads: int = 80, groups: int = 1, head_dim: int = 64,
                   chunk_size: int = 512, block_size: int = 8, seg: int = 4, prefetch: bool = True,
                   rescale: bool = True, pipe: bool = True, stage: int = 3, use_beta: bool = True,
                   is_varlen: bool = False, arch: int = 90, l2_prefetch: int = 4, maxnreg: int = 0,
                   walk_rescale: bool = False, widen: bool = True, whole: bool = False):
    """The kernel compiled for ``sm_<arch>a`` without a GPU, at the training launch (float32 keys and queries,
    no states in or out, ``chunked_bwd.CHUNKED_CONFIG``'s settings; ``maxnreg``: a register cap, 0 none; ``whole``:
    whole sequences, ``NSPLIT`` 1, with a final-state gradient): the ``CompiledKernel``. ``l2_prefetch`` goes
    through ``l2_prefetch_bits`` as ``launch`` passes it."""
    from triton.backends.compiler import GPUTarget

    constexprs = {"H": heads, "G": groups, "P": head_dim, "N": 128, "CT": chunk_size, "BS": block_size,
                  "SEG": seg, "NSPLIT": 1 if whole else 4, "USE_BETA": use_beta, "USE_INITIAL_STATE": False,
                  "USE_INITIAL_IMPORTANCE": False, "IS_VARLEN": is_varlen, "PREFETCH": prefetch,
                  "RESCALE": rescale, "PIPE": pipe, "STAGE": stage, "L2PF": l2_prefetch_bits(stage, l2_prefetch),
                  "WALK_RESCALE": walk_rescale, "WIDEN": widen, "WHOLE": whole, "USE_FINAL_STATE_GRADIENT": whole}
    types = {name: f"*{dtype}" for name in ("v", "beta", "dy", "dv", "dbeta")}
    types.update({"cu_seqlens": "*i32", "chunk_offsets": "*i32"})
    signature = {name: types.get(name, "*fp32") for name in POINTERS}
    signature.update({"T": "i32", "n_nh": "i32", "n_work": "i32"})
    signature.update({name: "constexpr" for name in constexprs})
    attrs = {(index,): [["tt.divisibility", 16]] for index in range(len(POINTERS))}
    source = GluonASTSource(palimpsa_gluon_local_kernel, signature, constexprs, attrs)
    options = {"num_warps": 1, **fr.FP_FUSION, **({"maxnreg": int(maxnreg)} if maxnreg else {})}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
