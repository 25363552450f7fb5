"""Gluon forward of the Palimpsa scan for Hopper-class GPUs: rescaled states, pair-shared reciprocals, readout
and row sums inside a warp.

The algorithm is the one ``kernels/emulation.py`` proves against the sequential reference (read its docstring
first): per head keep ``M' = e M`` and ``J' = e (I - I_prior)``, so that between renormalisations a token costs
one FFMA per state for each of ``M'`` and ``J'``, one add for ``D = J' + e I_prior``, a reciprocal (on half of the
states one per pair: ``1 / D1 = D2 / (D1 D2)``) and two for the readout ``y = sum_N (M' / D) q``.

Mapping (Gluon: the layouts are explicit, which plain Triton does not allow). A warp owns ``8`` channels of one
head; a thread owns 2 channels x ``N / 8`` states, the ``N`` states of a channel spread over 8 lanes. The states
are four register tiles ``[BV, N / 4]`` (tile ``t``, column ``j``: state ``n = N / 8 * (j // w) + t w + j % w``,
``w = N / 32``), so a thread's states of one tile are ``w`` consecutive ones (one vector load of ``k``) and tiles
0 and 1 are the pairs that share a reciprocal (``emulation.paired_columns``). The readout sums a thread's
states in registers, then over 8 lanes with 3 shuffles per channel: no shared memory and no barrier per token.
``k``, ``k^2`` and ``q`` come in float32 from a prologue (PyTorch, once per call, shared by every head of a
group; packed ``[B, T, G, 3, N]`` so that one address serves all twelve vector loads of a token), so the inner
loop converts nothing. The next token's inputs are loaded while the current one runs.

The checkpoints (every ``CT`` tokens, the true ``(M, I)``) and final states have the Triton path's layout, so
``triton_scan``'s backward runs on them unchanged: this module replaces the forward launch only.

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

import torch
import triton

from .emulation import TAU  # the algorithm's renormalisation threshold: one value for kernel and emulation

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

WARPS = 1  # warps per program; a program owns 8 channels per warp


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
    if head_dim % (8 * WARPS):
        return f"P = {head_dim} is not a multiple of {8 * WARPS}"
    if state_size < 32 or state_size & (state_size - 1):
        return f"N = {state_size} is not a power of two >= 32"
    return None


if gluon is not None:

    @gluon.jit
    def _rcp(x):
        """``1 / x`` as one ``rcp.approx.ftz.f32`` (1 ulp, one MUFU op; ``div.full.f32`` is 8 instructions)."""
        return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32,
                                         is_pure=True, pack=1)

    @gluon.jit
    def _load_token(v, kkq, g, beta, tok, i_h, i_g, o_v, o_n, W: gl.constexpr,
                    H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, USE_BETA: gl.constexpr):
        """Everything token ``tok`` needs: its log decay, the program's values and gains, and the four tiles'
        columns of ``k``, ``k^2``, ``q``. Unmasked: callers clamp ``tok`` to the sequence, so a prefetch past its
        end rereads the last token instead of zero-filling ~50 registers per token under a mask."""
        b_la = gl.load(g + tok * H + i_h).to(gl.float64)
        b_v = gl.load(v + (tok * H + i_h) * P + o_v).to(gl.float32)
        if USE_BETA:
            b_b = gl.load(beta + (tok * H + i_h) * P + o_v).to(gl.float32)
        else:
            b_b = b_v
        p_k = kkq + (tok * G + i_g) * (3 * N) + o_n  # one base: k, k^2 and q at immediate offsets from it
        p_s, p_q = p_k + N, p_k + 2 * N
        return (b_la, b_v, b_b, gl.load(p_k), gl.load(p_k + W), gl.load(p_k + 2 * W), gl.load(p_k + 3 * W),
                gl.load(p_s), gl.load(p_s + W), gl.load(p_s + 2 * W), gl.load(p_s + 3 * W),
                gl.load(p_q), gl.load(p_q + W), gl.load(p_q + 2 * W), gl.load(p_q + 3 * W))

    @gluon.jit
    def _update(b_m, b_j, b_ev, b_eb, b_k, b_s, USE_BETA: gl.constexpr):
        """The rescaled update of one tile: ``M' += (e v) k``, ``J' += (e beta) k^2`` (one FFMA each)."""
        b_m = b_m + gl.expand_dims(b_ev, 1) * gl.expand_dims(b_k, 0)
        if USE_BETA:
            b_j = b_j + gl.expand_dims(b_eb, 1) * gl.expand_dims(b_s, 0)
        return b_m, b_j

    @gluon.jit
    def _token(b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc, b_ip, x, y, u, tok, t, valid, i_h, o_v, T,
               H: gl.constexpr, P: gl.constexpr, CT: gl.constexpr, TAU_: gl.constexpr, USE_BETA: gl.constexpr,
               USE_UNCERTAINTY: gl.constexpr):
        """Advance the rescaled state by token ``tok`` (inputs ``x`` from ``_load_token``), write its readout.
        An invalid token (the empty half of the sequence's last pair) is the identity and writes nothing."""
        b_la, b_v, b_b, k0, k1, k2, k3, s0, s1, s2, s3, q0, q1, q2, q3 = x
        # a reference where the scale would pass e^TAU, at every chunk's end and at the sequence's end
        b_grown = b_sc - gl.where(valid, b_la, 0.0)
        is_ref = (b_grown > TAU_) | (t % CT == CT - 1) | (t == T - 1)
        if is_ref:  # renormalise: both states times c = a_t / e_{t-1} (warp-uniform, rare on slow heads)
            b_c = gl.exp((-b_grown).to(gl.float32))
            b_m0, b_m1, b_m2, b_m3 = b_m0 * b_c, b_m1 * b_c, b_m2 * b_c, b_m3 * b_c
            b_j0, b_j1, b_j2, b_j3 = b_j0 * b_c, b_j1 * b_c, b_j2 * b_c, b_j3 * b_c
        b_sc = gl.where(is_ref, 0.0, b_grown)
        b_e = gl.exp(b_sc.to(gl.float32))
        b_w = gl.where(valid, b_e, 0.0)  # the write's scale: 0 makes an invalid token the identity
        b_ev, b_eb = b_v * b_w, b_b * b_w
        b_m0, b_j0 = _update(b_m0, b_j0, b_ev, b_eb, k0, s0, USE_BETA)
        b_m1, b_j1 = _update(b_m1, b_j1, b_ev, b_eb, k1, s1, USE_BETA)
        b_m2, b_j2 = _update(b_m2, b_j2, b_ev, b_eb, k2, s2, USE_BETA)
        b_m3, b_j3 = _update(b_m3, b_j3, b_ev, b_eb, k3, s3, USE_BETA)
        b_ipe = b_ip * b_e
        b_d0, b_d1, b_d2, b_d3 = b_j0 + b_ipe, b_j1 + b_ipe, b_j2 + b_ipe, b_j3 + b_ipe
        b_rp = _rcp(b_d0 * b_d1)  # tiles 0 and 1 share one reciprocal per pair of states
        b_r0, b_r1 = b_d1 * b_rp, b_d0 * b_rp
        b_r2, b_r3 = _rcp(b_d2), _rcp(b_d3)
        b_acc = (b_m0 * b_r0) * gl.expand_dims(q0, 0) + (b_m1 * b_r1) * gl.expand_dims(q1, 0)
        b_acc += (b_m2 * b_r2) * gl.expand_dims(q2, 0) + (b_m3 * b_r3) * gl.expand_dims(q3, 0)
        o_y = (tok * H + i_h) * P + o_v
        m_y = o_v < gl.where(valid, P, 0)
        gl.store(y + o_y, gl.sum(b_acc, axis=1).to(y.dtype.element_ty), mask=m_y)
        if USE_UNCERTAINTY:  # u = sum_N q^2 / I = e sum_N q^2 / D
            b_uq = b_r0 * gl.expand_dims(q0 * q0, 0) + b_r1 * gl.expand_dims(q1 * q1, 0)
            b_uq += b_r2 * gl.expand_dims(q2 * q2, 0) + b_r3 * gl.expand_dims(q3 * q3, 0)
            gl.store(u + o_y, (gl.sum(b_uq, axis=1) * b_e).to(u.dtype.element_ty), mask=m_y)
        return b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc

    @gluon.jit
    def _store_state(p_m, p_i, o_s0, b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_ip, W: gl.constexpr):
        """Store a true state (``e = 1``): ``M = M'`` and ``I = J' + I_prior``."""
        gl.store(p_m + o_s0, b_m0)
        gl.store(p_m + o_s0 + W, b_m1)
        gl.store(p_m + o_s0 + 2 * W, b_m2)
        gl.store(p_m + o_s0 + 3 * W, b_m3)
        gl.store(p_i + o_s0, b_j0 + b_ip)
        gl.store(p_i + o_s0 + W, b_j1 + b_ip)
        gl.store(p_i + o_s0 + 2 * W, b_j2 + b_ip)
        gl.store(p_i + o_s0 + 3 * W, b_j3 + b_ip)

    @gluon.jit
    def palimpsa_gluon_fwd_kernel(
        v, kkq, g, beta, m0, i0, ip, y, u, ck_m, ck_i, mT, iT, cu_seqlens, chunk_offsets, T,
        H: gl.constexpr, G: gl.constexpr, P: gl.constexpr, N: gl.constexpr, BV: gl.constexpr, CT: gl.constexpr,
        TAU_: gl.constexpr, USE_BETA: gl.constexpr, USE_INITIAL_STATE: gl.constexpr,
        USE_INITIAL_IMPORTANCE: gl.constexpr, STORE_FINAL_STATE: gl.constexpr, STORE_CHECKPOINTS: gl.constexpr,
        USE_UNCERTAINTY: gl.constexpr, IS_VARLEN: gl.constexpr,
    ):
        # a warp: 8 channels (2 per thread over 4 lanes) x N / 4 columns per tile (N / 32 per thread over 8 lanes)
        W: gl.constexpr = N // 32
        L: gl.constexpr = gl.BlockedLayout([2, W], [4, 8], [BV // 8, 1], [1, 0])
        LV: gl.constexpr = gl.SliceLayout(1, L)
        LN: gl.constexpr = gl.SliceLayout(0, L)

        i_v, i_nh = gl.program_id(0), gl.program_id(1)
        i_n, i_h = i_nh // H, i_nh % H
        i_g = i_h // (H // G)
        if IS_VARLEN:
            bos = gl.load(cu_seqlens + i_n).to(gl.int64)
            T = (gl.load(cu_seqlens + i_n + 1).to(gl.int64) - bos).to(gl.int32)
            boc = gl.load(chunk_offsets + i_n).to(gl.int64)
        else:
            bos = i_n.to(gl.int64) * T
            boc = i_n.to(gl.int64) * gl.cdiv(T, CT)
        o_v = i_v * BV + gl.arange(0, BV, layout=LV)
        o_j = gl.arange(0, N // 4, layout=LN)
        o_n = (o_j // W) * (4 * W) + o_j % W  # tile 0's state columns; tile t's are t * W further
        o_s0 = gl.expand_dims(gl.arange(0, BV, layout=LV) * N, 1) + gl.expand_dims(o_n, 0)
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

        # the log-scale S = log e per head, in float64: each e_t = exp(S_t) is rounded once, S never drifts
        b_sc = gl.to_tensor(0.0).to(gl.float64)
        last = bos + T - 1
        # two tokens per iteration, each one's inputs loaded two tokens ahead into its own registers (a
        # loop-carried prefetch of one token would cost a register copy of every input per token)
        x1 = _load_token(v, kkq, g, beta, bos, i_h, i_g, o_v, o_n, W, H, G, P, N, USE_BETA)
        x2 = _load_token(v, kkq, g, beta, gl.minimum(bos + 1, last), i_h, i_g, o_v, o_n, W, H, G, P, N,
                         USE_BETA)
        for i_c in range(gl.cdiv(T, CT)):
            if STORE_CHECKPOINTS:  # a chunk start follows a reference token: M' and J' are the true states
                o_ck = (((boc + i_c) * H + i_h) * P + i_v * BV) * N
                _store_state(ck_m + o_ck, ck_i + o_ck, o_s0, b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3,
                             b_ip, W)
            # CT is even, so only the sequence's last pair can be half empty
            for t in range(i_c * CT, gl.minimum(i_c * CT + CT, T), 2):
                tok = bos + t
                b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc = _token(
                    b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc, b_ip, x1, y, u, tok, t, t < T, i_h, o_v,
                    T, H, P, CT, TAU_, USE_BETA, USE_UNCERTAINTY)
                x1 = _load_token(v, kkq, g, beta, gl.minimum(tok + 2, last), i_h, i_g, o_v, o_n, W, H, G,
                                 P, N, USE_BETA)
                b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc = _token(
                    b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_sc, b_ip, x2, y, u, tok + 1, t + 1,
                    t + 1 < T, i_h, o_v, T, H, P, CT, TAU_, USE_BETA, USE_UNCERTAINTY)
                x2 = _load_token(v, kkq, g, beta, gl.minimum(tok + 3, last), i_h, i_g, o_v, o_n, W, H, G,
                                 P, N, USE_BETA)

        if STORE_FINAL_STATE:  # the last token is a reference: the true states
            _store_state(mT + o_state, iT + o_state, o_s0, b_m0, b_m1, b_m2, b_m3, b_j0, b_j1, b_j2, b_j3, b_ip,
                         W)

FWD_POINTERS = ("v", "kkq", "g", "beta", "m0", "i0", "ip", "y", "u", "ck_m", "ck_i", "mT", "iT",
                "cu_seqlens", "chunk_offsets")


def compile_forward(*, dtype: str = "bf16", heads: int = 80, groups: int = 1, head_dim: int = 64,
                    state_size: int = 128, chunk_size: int = 256, use_beta: bool = True, use_initial_state=False,
                    use_initial_importance=False, store_final_state=False, store_checkpoints=True,
                    use_uncertainty=False, is_varlen=False, arch: int = 90):
    """Compile the forward kernel for ``sm_<arch>a`` without a GPU (``triton.compile`` with a target), with the
    specialisation a launch gets (16-byte aligned pointers). Returns the ``CompiledKernel`` (``asm['ptx']``,
    ``asm['cubin']``)."""
    from triton.backends.compiler import GPUTarget

    constexprs = {"H": heads, "G": groups, "P": head_dim, "N": state_size, "BV": 8 * WARPS, "CT": chunk_size,
                  "TAU_": TAU, "USE_BETA": use_beta, "USE_INITIAL_STATE": use_initial_state,
                  "USE_INITIAL_IMPORTANCE": use_initial_importance, "STORE_FINAL_STATE": store_final_state,
                  "STORE_CHECKPOINTS": store_checkpoints, "USE_UNCERTAINTY": use_uncertainty,
                  "IS_VARLEN": is_varlen}
    types = {"v": f"*{dtype}", "beta": f"*{dtype}", "y": f"*{dtype}", "u": f"*{dtype}", "g": "*fp32",
             "cu_seqlens": "*i32", "chunk_offsets": "*i32"}
    signature = {name: types.get(name, "*fp32") for name in FWD_POINTERS}
    signature["T"] = "i32"
    signature.update({name: "constexpr" for name in constexprs})
    attrs = {(index,): [["tt.divisibility", 16]] for index in range(len(FWD_POINTERS))}
    source = GluonASTSource(palimpsa_gluon_fwd_kernel, signature, constexprs, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": WARPS})


def gluon_forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, output_final_state,
                  output_uncertainty, store_checkpoints, chunk_size):
    """Launch the Gluon forward: ``y, M_T, I_T, u`` (None where not asked for) and the checkpoints, exactly as
    ``triton_scan._forward`` returns them (same shapes, dtypes and checkpoint layout)."""
    from . import triton_scan as ts

    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    if chunk_size % 2:
        raise ValueError(f"the Gluon forward walks tokens in pairs: chunk_size ({chunk_size}) must be even")
    n_states = ts._n_states(batch, cu_seqlens)
    device = v.device
    ip = ts._prior_tensor(importance_prior, torch.float32, device)
    offsets, n_chunks = ts._chunk_offsets(cu_seqlens, batch, length, chunk_size)
    # the prologue: float32 k, k^2, q once per call, shared by the heads of a group, packed [B, T, G, 3, N]
    k32 = k.float()
    kkq = torch.stack((k32, k32 * k32, q.float()), dim=3)
    y = ts._output(v.shape, v.dtype, device)
    u = ts._output(v.shape, v.dtype, device) if output_uncertainty else None
    final_shape, ck_shape = ts._output_shapes(v, k, cu_seqlens, n_chunks, store_checkpoints)
    m_t = ts._output(final_shape, torch.float32, device) if output_final_state else None
    i_t = ts._output(final_shape, torch.float32, device) if output_final_state else None
    ck_m = torch.empty(ck_shape, dtype=torch.float32, device=device)
    ck_i = torch.empty(ck_shape, dtype=torch.float32, device=device)
    block_v = 8 * WARPS
    grid = (head_dim // block_v, n_states * heads)
    palimpsa_gluon_fwd_kernel[grid](
        v, kkq, log_decay, beta, m0, i0, ip, y, u, ck_m, ck_i, m_t, i_t, cu_seqlens, offsets, length,
        H=heads, G=groups, P=head_dim, N=state_size, BV=block_v, CT=chunk_size, TAU_=TAU,
        USE_BETA=beta is not None, USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None,
        STORE_FINAL_STATE=output_final_state, STORE_CHECKPOINTS=store_checkpoints,
        USE_UNCERTAINTY=output_uncertainty, IS_VARLEN=cu_seqlens is not None, num_warps=WARPS,
    )
    return y, m_t, i_t, u, ck_m, ck_i


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


def loop_instructions(compiled) -> dict:
    """SASS opcode counts of the kernel's token loop (the innermost back-edge's body; the renormalising branches
    inside it counted apart), from ``nvdisasm``. Keys: ``opcodes`` (main path), ``branch`` (the renormalising
    branches), ``tokens`` (per loop iteration)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([_cuda_tool("nvdisasm"), "-c", cubin.name], capture_output=True, text=True,
                              check=True).stdout
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", line))}
    # the token loop: the back-edge spanning the most instructions among the innermost ones (a back-edge whose
    # range holds no other back-edge)
    edges = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             if (m := re.search(r"BRA[^`]*`\((\.L_x_\d+)\)", line)) and labels.get(m.group(1), i) < i]
    inner = [e for e in edges if not any(o != e and e[0] <= o[0] and o[1] <= e[1] for o in edges)]
    start, end = max(inner, key=lambda e: e[1] - e[0])
    # forward branches inside the loop that jump over a block: the renormalising multiplies
    skipped = set()
    for i in range(start, end):
        m = re.search(r"BRA[^`]*`\((\.L_x_\d+)\)", lines[i])
        if m and start < labels[m.group(1)] <= end and labels[m.group(1)] > i:
            skipped.update(range(i + 1, labels[m.group(1)]))
    opcodes, branch = {}, {}
    for i in range(start, end + 1):
        m = re.match(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)", lines[i])
        if m:
            counts = branch if i in skipped else opcodes
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return {"opcodes": opcodes, "branch": branch, "tokens": 2}
