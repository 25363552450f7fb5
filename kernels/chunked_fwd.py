"""The scan's forward with its chunks independent of one another (docs/kernels.md, "chunk-parallel forward").

The sequential forward (``fused_recurrent.palimpsa_fwd_kernel``) walks a whole sequence in one program, so at B = 1
its grid is the heads times the channel blocks (320 programs of four warps at 2.7b shapes: 2.4 per SM on an H100)
and the GPU idles where it could hide latency. But both state recursions are linear (palimpsa-math section 3,
``J = I - I_prior``)::

    M_t = a_t M_{t-1} + v_t (x) k_t           J_t = a_t J_{t-1} + beta_t (x) k_t^2

so the state entering every chunk of ``CT`` tokens (the backward's checkpoints) follows from the chunks before it
without walking their tokens one by one: three launches, each exact in exact arithmetic.

1. ``palimpsa_fwd_local_kernel``: every chunk but a sequence's last gets its end state from a zero start,
   ``sum_t w_t v_t (x) k_t`` and ``sum_t w_t beta_t (x) k_t^2`` with ``w_t`` the chunk's decays after token ``t``:
   matrix products per sub-block of ``BT`` tokens (``tl.dot``, tensor cores), written into the checkpoint slot of
   the next chunk.
2. ``palimpsa_fwd_carry_kernel``: a scan over the chunks of a sequence turns those slots in place into the
   checkpoints, ``S(c) = A(c - 1) S(c - 1) + L(c - 1)`` (``A`` a chunk's product of decays), from the initial state.
3. ``palimpsa_fwd_kernel`` with ``CHUNKED``: one program per (channel block, sequence and head, chunk) walks its
   chunk from its checkpoint as the sequential forward does, writing ``y`` (and ``u``); the last chunk's program
   writes the final state. At B = 1, L = 8192 and ``CT = 512`` that is 16 times the programs. On Hopper GPUs the
   same walk runs as CUDA C++ compiled by NVRTC (``cuda_walk.py``; ``fwd_config`` key ``walk_CUDA`` or
   ``PALIMPSA_CUDA_WALK``: ``auto``, 0, 1).

The checkpoints are the sequential forward's to rounding (the matrix products sum in another order, in TF32 where
PyTorch allows it; a float32 run under ``torch.set_float32_matmul_precision("highest")`` in tf32x3, three TF32
products with float32's error, ``FULL_PRECISION_DOT``; float64 in IEEE products), so the backwards run on them
unchanged. Every decay product is the exponential of a sum of log decays
over exactly the tokens it spans (a masked sum inside a sub-block, never a difference of two running sums).
"""

import warnings

import torch
import triton
import triton.language as tl

from . import chunked_bwd, cuda_build, cuda_fwd_local, cuda_walk
from . import fused_recurrent as fr

# the local pass's tiles: BP channels x BK states x BT tokens per matrix product; BP and local_warps 0: the
# precision's default (chunked_bwd's corrections': 32 channels and 4 warps with TF32 products, 16 and 8 with IEEE
# ones); BK 0: all the states. SUFFIX 1: each token weighted by its decays to the chunk's end, the sub-blocks from the
# last, so that the products only accumulate (0: the state times each sub-block's decay, the form before). On an H200
# at 2.7b shapes, bf16, L = 8192 the local pass takes 0.235 ms at B = 1 and 0.887 at B = 4 against SUFFIX 0's 0.260
# and 0.996; BK 64 or 32 (more programs, fewer accumulators each), BP 64 or 16, BT 64 or 16, 8 warps and one or four
# pipeline stages were all slower (docs/bench/fwd-local-2026-11-29, calls 2-4). local_CUDA (or
# PALIMPSA_CUDA_FWD_LOCAL; None: the environment's, auto by default) runs the local pass in CUDA C++ instead
# (cuda_fwd_local.py: 0.143 ms at B = 1 and 0.512 at B = 4 on an H200, call 15): auto on compute capability 9.x
# (packed sequences, P = 128 and float32 keys included since docs/bench/fixcp-2026-11-29), 1 wherever it can run, 0
# never; a config that names the Triton kernel's keys keeps that kernel
# walk_BV, walk_warps, walk_UNROLL: the chunk walk's tiling (palimpsa_fwd_kernel's BV, num_warps, UNROLL); 0 takes
# WALK_CONFIG's
CHUNKED_FWD_CONFIG = {"BP": 0, "BK": 0, "BT": 32, "DOT": "auto", "local_warps": 0, "SUFFIX": 1, "local_CUDA": None,
                      "walk_BV": 0, "walk_warps": 0, "walk_UNROLL": 0}
# The chunk walk's tiling: one warp of eight channels, one token an iteration (the walk has programs enough to fill
# the GPU without four warps a program, and a warp's readout sum needs no barrier), in the layout that the
# checkpoint's load gives it (32 lanes along N). On an H100 at 2.7b shapes, bf16, B = 1, L = 8192: the chunked
# forward 3.01 ms against 3.35 with fused_recurrent.FWD_CONFIG's tiling and 3.40 with the layout of
# fused_recurrent.ONE_WARP_FWD_CONFIG (docs/bench/chunked-tuning-h100-2026-11-26)
# KQ32: the walk reads float32 copies of 16-bit keys and queries (fused_recurrent._float32_keys): the forward at
# B = 1, L = 8192 2.34 ms against 2.46 and at B = 4 8.85 against 9.34, copies included (H200,
# docs/bench/ring-2026-11-27)
WALK_CONFIG = {"BV": 8, "TRANS": False, "UNROLL": 1, "num_warps": 1, "KQ32": True}
# "auto" takes the chunked forward where the sequential one, in its one-warp tiling, would give the GPU fewer than
# this many programs per SM. Until 2026-11-27 that was 12 (what an SM holds at its 168 registers: B = 2 at 2.7b
# shapes, 9.7 an SM); since the chunk walk's SCATTER and RESCALE it wins at every batch measured, on an H200 at 2.7b
# shapes, L = 8192 (forward, ms): B = 3 (14.5 an SM) 7.08 against 10.31, B = 4 (19.4) 9.34 against 10.69, B = 8
# (38.8) 18.57 against 21.55 (docs/bench/rescaled-2026-11-27, calls 4 and 5). Until 2026-11-28 that was 40; then
# at B = 16, L = 8192 (77.6 an SM) it took 31.96 ms with the CUDA walk and 35.12 with the Triton walk against the
# sequential 40.68, and at B = 32, L = 4096 (155.2 an SM) 31.68 and 34.91 against 39.27, forward + backward 2-3%
# faster too and peak memory equal (docs/bench/nvrtc-walk-2026-11-28, call 8); larger grids were not measured.
# Without gradients (inference prefill) the chunked forward still allocates the checkpoints, which the sequential
# forward does not: at B = 9-32 auto now takes it there too, 2.5 GiB at B = 32, L = 8192, 2.7b shapes (512 chunks x
# 80 heads x 64 x 128 float32 pairs), freed when the call returns
PROGRAMS_PER_SM = 160


def walk_config(config: dict) -> dict:
    """The chunk walk's launch config: ``WALK_CONFIG`` with the ``walk_*`` keys of ``config`` that are set."""
    walk = dict(WALK_CONFIG)
    for key, name in (("walk_BV", "BV"), ("walk_warps", "num_warps"), ("walk_UNROLL", "UNROLL")):
        if int(config.get(key, 0)):
            walk[name] = int(config[key])
    if "walk_SCATTER" in config:  # 0 sums the readout in a tree over the lanes (fused_recurrent._scatters)
        walk["SCATTER"] = int(config["walk_SCATTER"])
    if "walk_RESCALE" in config:  # 0 walks the true states (fused_recurrent._rescales)
        walk["RESCALE"] = int(config["walk_RESCALE"])
    if "walk_KQ32" in config:  # 0 reads the keys and queries as they come (fused_recurrent._float32_keys)
        walk["KQ32"] = bool(int(config["walk_KQ32"]))
    return walk


@triton.jit
def palimpsa_fwd_local_kernel(
    v, k, g, beta, ck_m, ck_i, cu_seqlens, chunk_offsets, chunk_seq, T,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BP: tl.constexpr, BK: tl.constexpr,
    CT: tl.constexpr, BT: tl.constexpr, USE_BETA: tl.constexpr, IS_VARLEN: tl.constexpr, DOT: tl.constexpr,
    ACC: tl.constexpr, SUFFIX: tl.constexpr,
):
    """``BP`` channels of one head's end state of one chunk from a zero start, into the next chunk's checkpoint
    slot (a sequence's last chunk has no next one and does nothing). ``SUFFIX``: the sub-blocks from the last, each
    token weighted by the exponential of its log decays to the chunk's end (this sub-block's after it plus the later
    sub-blocks' sums), so that the products only accumulate; else from the first, the state times each sub-block's
    decay before its product."""
    i_ck, i_h, i_pk = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_pb, i_kb = i_pk // tl.cdiv(N, BK), i_pk % tl.cdiv(N, BK)  # (BK below N: the states in blocks)
    i_g = i_h // (H // G)
    _, bos, T, boc, i_c = chunked_bwd.chunk_at(i_ck, chunk_seq, cu_seqlens, chunk_offsets, T, CT, IS_VARLEN)
    t0 = i_c * CT
    last = i_c == tl.cdiv(T, CT) - 1
    n = tl.where(last, 0, tl.minimum(CT, T - t0))
    o_p = i_pb * BP + tl.arange(0, BP)
    o_k = i_kb * BK + tl.arange(0, BK)
    o_b = tl.arange(0, BT)
    after = o_b[None, :] > o_b[:, None]  # [t, r]: r after t
    b_m = tl.zeros([BP, BK], dtype=ACC)
    b_j = tl.zeros([BP, BK], dtype=ACC)
    n_sub = tl.cdiv(n, BT)
    b_after = tl.sum(tl.zeros([BT], dtype=ACC), 0)  # (SUFFIX) the log decays of the sub-blocks after this one
    for jj in range(n_sub):
        j = n_sub - 1 - jj if SUFFIX else jj
        o_t = j * BT + o_b
        m_t = o_t < n
        tok = bos + t0 + o_t
        b_g = tl.load(g + tok * H + i_h, mask=m_t, other=0).to(ACC)
        b_within = tl.sum(tl.where(after, b_g[None, :], 0), 1)  # [t]: this sub-block's log decays after t
        m_tk = m_t[:, None] & (o_k[None, :] < N)
        m_tp = m_t[:, None] & (o_p[None, :] < P)
        b_k = tl.load(k + (tok[:, None] * G + i_g) * N + o_k[None, :], mask=m_tk, other=0).to(ACC)
        b_v = tl.load(v + (tok[:, None] * H + i_h) * P + o_p[None, :], mask=m_tp, other=0).to(ACC)
        if USE_BETA:
            b_b = tl.load(beta + (tok[:, None] * H + i_h) * P + o_p[None, :], mask=m_tp, other=0).to(ACC)
        if SUFFIX:  # each token weighted by its decays to the chunk's end: the products only accumulate
            b_w = tl.exp(b_within + b_after)
            b_m += tl.dot(tl.trans(b_v * b_w[:, None]), b_k, input_precision=DOT)
            if USE_BETA:
                b_j += tl.dot(tl.trans(b_b * b_w[:, None]), b_k * b_k, input_precision=DOT)
            b_after += tl.sum(b_g, 0)
        else:  # first to last, the sub-block's decay carrying what the earlier ones wrote
            b_carry = tl.exp(tl.sum(b_g, 0))
            b_w = tl.exp(b_within)
            b_m = b_carry * b_m + tl.dot(tl.trans(b_v * b_w[:, None]), b_k, input_precision=DOT)
            if USE_BETA:
                b_j = b_carry * b_j + tl.dot(tl.trans(b_b * b_w[:, None]), b_k * b_k, input_precision=DOT)
    o_pk = o_p[:, None] * N + o_k[None, :]
    m_pk = (o_p[:, None] < tl.where(last, 0, P)) & (o_k[None, :] < N)  # the last chunk has no slot
    o_l = ((i_ck + 1).to(tl.int64) * H + i_h) * P * N
    tl.store(ck_m + o_l + o_pk, b_m, mask=m_pk)
    tl.store(ck_i + o_l + o_pk, b_j, mask=m_pk)


@triton.jit
def palimpsa_fwd_carry_kernel(
    g, m0, i0, ip, ck_m, ck_i, cu_seqlens, chunk_offsets, T,
    H: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CT: tl.constexpr, BE: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, USE_INITIAL_IMPORTANCE: tl.constexpr, IS_VARLEN: tl.constexpr,
    ACC: tl.constexpr,
):
    """For ``BE`` elements of one (sequence, head)'s state: the checkpoints, from the initial state and the local
    end states in the slots (``ck_i``'s hold ``J``, the importance above the prior; the checkpoints hold ``I``)."""
    i_e, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos, T, boc = fr._bounds(cu_seqlens, chunk_offsets, i_n, T, CT, IS_VARLEN)
    o_e = i_e * BE + tl.arange(0, BE)
    m_e = o_e < P * N
    o_t = tl.arange(0, CT)
    b_ip = tl.load(ip).to(ACC)
    o_state = i_nh.to(tl.int64) * P * N + o_e
    if USE_INITIAL_STATE:
        b_m = tl.load(m0 + o_state, mask=m_e, other=0).to(ACC)
    else:
        b_m = tl.zeros([BE], dtype=ACC)
    if USE_INITIAL_IMPORTANCE:
        b_i = tl.load(i0 + o_state, mask=m_e, other=0).to(ACC)
        b_j = b_i - b_ip
    else:
        b_i = tl.zeros([BE], dtype=ACC) + b_ip
        b_j = tl.zeros([BE], dtype=ACC)
    o_l = (boc * H + i_h) * P * N
    tl.store(ck_m + o_l + o_e, b_m, mask=m_e)
    tl.store(ck_i + o_l + o_e, b_i, mask=m_e)  # the first checkpoint: the initial state as given
    for i_c in range(1, tl.cdiv(T, CT)):
        b_g = tl.load(g + (bos + (i_c - 1) * CT + o_t) * H + i_h, mask=(i_c - 1) * CT + o_t < T, other=0).to(ACC)
        b_carry = tl.exp(tl.sum(b_g, 0))
        o_l = ((boc + i_c) * H + i_h) * P * N
        b_m = b_carry * b_m + tl.load(ck_m + o_l + o_e, mask=m_e, other=0)
        b_j = b_carry * b_j + tl.load(ck_i + o_l + o_e, mask=m_e, other=0)
        tl.store(ck_m + o_l + o_e, b_m, mask=m_e)
        tl.store(ck_i + o_l + o_e, b_j + b_ip, mask=m_e)


def _sizes(config: dict, dtype: torch.dtype, head_dim: int, state_size: int, chunk_size: int, on_gpu: bool) -> dict:
    """The local pass's block sizes and precision (tl.dot wants every dimension >= 16 on a GPU; the interpreter takes
    any, which the tests use to split the channels)."""
    least = 16 if on_gpu else 1
    dot = chunked_bwd._dot_precision(config["DOT"], dtype, FULL_PRECISION_DOT)
    return {"BP": max(least, min(int(config["BP"]) or chunked_bwd._block_p(dot), triton.next_power_of_2(head_dim))),
            "local_warps": int(config["local_warps"]) or chunked_bwd._correct_warps(dot),
            "BK": max(least, triton.next_power_of_2(min(int(config["BK"]) or state_size, state_size))),
            "BT": max(least, min(int(config["BT"]), chunk_size)),
            "BE": min(1024, triton.next_power_of_2(head_dim * state_size)), "DOT": dot}


# DOT "auto"'s products for float32 inputs at full precision (PyTorch's float32 matmul precision "highest", the
# trainer's default): tf32x3, three TF32 tensor-core products that carry about 22 bits of each operand, so the error
# is float32's (the float64 checks of scripts/check_scan_gpu.py: every float32 error at most 6.5e-7 with the chunked
# forward and backward forced in tf32x3, 9.1e-7 as dispatched, tolerance 1e-5; the forward's errors equal IEEE
# products' to three digits); IEEE products run in the FMA form and made the chunked forward lose at B = 4. On an H200
# at 2.7b shapes (forward, ms, against the sequential forward that auto took before): B = 1, L = 8192 2.73 against
# 4.70; B = 2 5.25 against 6.55; B = 3 7.90 against 11.14; B = 4 10.41 against 11.31 (docs/bench/tf32x3-2026-11-28,
# call 1). DOT "ieee" asks for IEEE products
FULL_PRECISION_DOT = "tf32x3"
MAX_CHUNKS = 65535  # the chunk walk's grid runs over the chunks in its third dimension, which CUDA caps
WALK_RUNS = {"cuda": 0, "triton": 0}  # which chunk walk ran, counted per call (scripts/check_scan_gpu.py prints it)
LOCAL_RUNS = {"cuda": 0, "triton": 0}  # which local pass ran (cuda: cuda_fwd_local.py's)


def can_run(length: int, chunk_size: int) -> bool:
    """Whether the chunked forward takes these sizes: a power-of-two chunk (its launches tile whole chunks) and at
    most ``MAX_CHUNKS`` chunks in the longest sequence (33.5M tokens at ``CT = 512``)."""
    return chunk_size & (chunk_size - 1) == 0 and triton.cdiv(length, chunk_size) <= MAX_CHUNKS


def worth_it(n_states: int, heads: int, head_dim: int, length: int, chunk_size: int, block_v: int,
             device: torch.device) -> bool:
    """Whether ``auto`` takes the chunked forward: a sequence of several chunks, and a sequential grid of ``block_v``
    channels a program (the one-warp tiling's 8) of fewer than ``PROGRAMS_PER_SM`` programs per SM (at 2.7b shapes
    on an H100 or H200, 132 SMs, B = 1 gives 4.8, B = 8 38.8, B = 32 155.2: up to B = 32)."""
    if device.type != "cuda" or length <= chunk_size or not can_run(length, chunk_size):
        return False
    programs = n_states * heads * triton.cdiv(head_dim, block_v)
    return programs < PROGRAMS_PER_SM * fr._sm_count(device)


def _cuda_or_fall_back(run, module, config: dict, kernel: str, fallback: str) -> bool:
    """``run()`` (a CUDA kernel of this module's launches), True where it ran; False where it failed under ``auto``
    and the Triton ``fallback`` is to run instead, with a warning. Under ``on`` (the module's switch 1) every error
    propagates, and so does running out of memory under ``auto`` (``torch.OutOfMemoryError``, a RuntimeError: the
    Triton kernel would need the memory too, and the kernel is not at fault). An error of compiling or loading the
    kernel (``cuda_build.CompileError``, ``LoadError``, an ``OSError`` of the libraries) leaves this and every later
    call of the process to Triton (``module.FAILED`` says why); any other RuntimeError, such as ``cuLaunchKernel``
    failing, only this call, so that one bad launch turns the kernel off for no other device or shape."""
    try:
        run()
    except torch.OutOfMemoryError:
        raise
    except (OSError, RuntimeError) as error:
        if module.mode(config) == "on":
            raise
        if isinstance(error, (cuda_build.CompileError, cuda_build.LoadError, OSError)):
            module.FAILED = str(error)
            warnings.warn(f"{kernel} failed to compile or load ({error}); {fallback} runs instead in this process "
                          f"(set {module.ENV}=0 to skip the attempt)", RuntimeWarning, stacklevel=4)
        else:
            warnings.warn(f"{kernel} failed ({type(error).__name__}: {error}); {fallback} runs this call instead",
                          RuntimeWarning, stacklevel=4)
        return False
    return True


def _cuda_walk(v, k, q, log_decay, beta, ck_m, ck_i, ip, cu_seqlens, offsets, n_chunks, n_states, max_chunks,
               chunk_size, output_final_state, fwd_config):
    """``y, M_T, I_T`` from the CUDA chunk walk (``cuda_walk.walk``), or three Nones where it failed under ``auto`` and
    the Triton walk is to run instead (:func:`_cuda_or_fall_back`)."""
    walked = []

    def run():
        walked.extend(cuda_walk.walk(v, *fr._float32_keys(k, q, True), log_decay, beta, ck_m, ck_i, ip, cu_seqlens,
                                     offsets, n_chunks, n_states, max_chunks, chunk_size, output_final_state))

    if not _cuda_or_fall_back(run, cuda_walk, fwd_config, "the CUDA chunk walk", "the Triton walk"):
        return None, None, None
    WALK_RUNS["cuda"] += 1
    return tuple(walked)


def _cuda_local(v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, n_chunks, n_states, max_chunks, chunk_size,
                config) -> bool:
    """The chunks' end states from the CUDA local pass (``cuda_fwd_local.local``): True, or False where it failed
    under ``auto`` and the Triton kernel is to run instead (:func:`_cuda_or_fall_back`)."""
    def run():
        cuda_fwd_local.local(v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, n_chunks, n_states, max_chunks,
                             chunk_size)

    if not _cuda_or_fall_back(run, cuda_fwd_local, config, "the CUDA local pass of the chunked forward",
                              "the Triton kernel"):
        return False
    LOCAL_RUNS["cuda"] += 1
    return True


def chunked_forward(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, output_final_state,
                    output_uncertainty, store_checkpoints, fwd_config, chunk_size):
    """``y, M_T, I_T, u`` and the checkpoints, as ``fused_recurrent._forward`` returns them, by the three launches
    of this module (the checkpoints are computed whether or not they are returned: the chunks start from them)."""
    config = {**CHUNKED_FWD_CONFIG, **{key: val for key, val in fwd_config.items() if key != "kernel"}}
    batch, length, heads, head_dim = v.shape
    if not can_run(length, chunk_size):
        raise ValueError(f"the chunked forward needs a power-of-two chunk_size and at most {MAX_CHUNKS} chunks a "
                         f"sequence (chunk_size {chunk_size}, {length} tokens); use the sequential forward "
                         "(PALIMPSA_TRITON_FORWARD=sequential)")
    groups, state_size = k.shape[2], k.shape[3]
    n_states = fr._n_states(batch, cu_seqlens)
    device, state_dtype = v.device, fr._state_dtype(v.dtype)
    ip = fr._prior_tensor(importance_prior, state_dtype, device)
    offsets, n_chunks = fr._chunk_offsets(cu_seqlens, batch, length, chunk_size)
    sizes = _sizes(config, v.dtype, head_dim, state_size, chunk_size, v.is_cuda)
    _, ck_shape = fr._output_shapes(v, k, cu_seqlens, n_chunks, True)
    ck_m = torch.empty(ck_shape, dtype=state_dtype, device=device)
    ck_i = torch.empty_like(ck_m)
    chunk_seq, max_chunks = None, triton.cdiv(length, chunk_size)
    if cu_seqlens is not None:
        counts = fr._chunk_counts(cu_seqlens, chunk_size)
        chunk_seq = torch.repeat_interleave(torch.arange(n_states, device=device, dtype=torch.int32), counts,
                                            output_size=n_chunks)
        max_chunks = int(counts.max())
    common = {"H": heads, "P": head_dim, "N": state_size, "CT": chunk_size, "IS_VARLEN": cu_seqlens is not None,
              "ACC": fr._acc_dtype(v.dtype)}
    if not (cuda_fwd_local.wanted(v, k, beta, chunk_size, config, fwd_config, n_states)
            and _cuda_local(v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, n_chunks, n_states, max_chunks,
                            chunk_size, config)):
        blocks = triton.cdiv(head_dim, sizes["BP"]) * triton.cdiv(state_size, sizes["BK"])  # channels x states
        palimpsa_fwd_local_kernel[(n_chunks, heads, blocks)](
            v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, chunk_seq, length, G=groups, BP=sizes["BP"],
            BK=sizes["BK"], BT=sizes["BT"], USE_BETA=beta is not None, DOT=sizes["DOT"],
            SUFFIX=int(config["SUFFIX"]), num_warps=sizes["local_warps"], **common, **fr.FP_FUSION,
        )
        LOCAL_RUNS["triton"] += 1
    palimpsa_fwd_carry_kernel[(triton.cdiv(head_dim * state_size, sizes["BE"]), n_states * heads)](
        log_decay, m0, i0, ip, ck_m, ck_i, cu_seqlens, offsets, length, BE=sizes["BE"],
        USE_INITIAL_STATE=m0 is not None, USE_INITIAL_IMPORTANCE=i0 is not None, num_warps=4, **common, **fr.FP_FUSION,
    )
    y = None
    if cuda_walk.wanted(v, k, beta, output_uncertainty, fwd_config):
        y, m_t, i_t = _cuda_walk(v, k, q, log_decay, beta, ck_m, ck_i, ip, cu_seqlens, offsets, n_chunks, n_states,
                                 max_chunks, chunk_size, output_final_state, fwd_config)
        u = None
    if y is None:
        y, m_t, i_t, u = fr._walk(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, offsets,
                                  n_chunks, ck_m, ck_i, output_final_state, output_uncertainty, False,
                                  walk_config(config), chunk_size, chunks=max_chunks)
        WALK_RUNS["triton"] += 1
    if not store_checkpoints:
        ck_m, ck_i = (torch.empty((1,), dtype=state_dtype, device=device) for _ in range(2))
    return y, m_t, i_t, u, ck_m, ck_i

def compile_kernels(*, dtype: str = "bf16", heads: int = 80, groups: int = 1, head_dim: int = 64,
                    state_size: int = 128, chunk_size: int = 512, arch: int = 90) -> dict:
    """The three launches of :func:`chunked_forward` compiled for ``sm_<arch>a`` without a GPU, at the launch it
    makes on a GPU (beta on, no states in or out, no ``u``), and the sequential forward beside them:
    ``{name: resource usage}``."""
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    sizes = _sizes(CHUNKED_FWD_CONFIG, torch_dtype, head_dim, state_size, chunk_size, on_gpu=True)
    low = {n: f"*{dtype}" for n in ("v", "k", "q", "beta", "y", "u")}
    low.update({"cu_seqlens": "*i32", "chunk_offsets": "*i32", "chunk_seq": "*i32"})
    shape = {"H": heads, "P": head_dim, "N": state_size, "CT": chunk_size, "IS_VARLEN": False, "ACC": tl.float32}
    tilings = {}
    for name, config in (("walk", walk_config(CHUNKED_FWD_CONFIG)), ("sequential", fr.FWD_CONFIG)):
        block_v, cfg = fr._launch_config({"UNROLL": 1, **config}, head_dim)
        warps = cfg.pop("num_warps")
        cfg.pop("KQ32", None)  # (the launch's pointer types, below)
        tilings[name] = warps, {
            **shape, **cfg, "G": groups, "BV": block_v, "BK": triton.next_power_of_2(state_size), "USE_BETA": True,
            "USE_INITIAL_STATE": False, "USE_INITIAL_IMPORTANCE": False, "STORE_FINAL_STATE": False,
            "USE_UNCERTAINTY": False, "FAST_RCP": True, "STORE_CHECKPOINTS": name == "sequential",
            "CHUNKED": name == "walk", "SCATTER": name == "walk", "RESCALE": fr._rescales(config, name == "walk"),
            "FAST_EXP": True}
    launches = {
        "local": (palimpsa_fwd_local_kernel, sizes["local_warps"], {
            **shape, "G": groups, "BP": sizes["BP"], "BK": sizes["BK"], "BT": sizes["BT"], "USE_BETA": True,
            "DOT": sizes["DOT"], "SUFFIX": int(CHUNKED_FWD_CONFIG["SUFFIX"])}),
        "carry": (palimpsa_fwd_carry_kernel, 4, {**shape, "BE": sizes["BE"], "USE_INITIAL_STATE": False,
                                                 "USE_INITIAL_IMPORTANCE": False}),
        **{name: (fr.palimpsa_fwd_kernel, *tiling) for name, tiling in tilings.items()},
    }
    float32_keys = {"k": "*fp32", "q": "*fp32"} if walk_config(CHUNKED_FWD_CONFIG).get("KQ32") else {}
    return {name: chunked_bwd.compile_launch(kernel, num_warps, constexprs,
                                             {**low, **float32_keys} if name == "walk" else low, arch)
            for name, (kernel, num_warps, constexprs) in launches.items()}
