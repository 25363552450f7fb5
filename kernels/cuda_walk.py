"""The chunk-parallel forward's chunk walk in CUDA C++, compiled at run time by NVRTC (docs/kernels.md, "The chunk
walk in CUDA C++").

``chunked_fwd.py``'s third launch walks every chunk from its checkpoint and writes ``y``. Compiled by Triton it runs
321 SASS instructions a token and lane; plain Triton chooses the layouts, the copies of the prefetched inputs and the
readout's reduction itself. This kernel does the same walk with the mapping chosen by hand:

* a CTA walks one (sequence, head, chunk) over ``CW`` channels (64, or ``P`` below 64) with ``CW / 8`` warps, a
  warp 8 channels; a lane holds 2 channels x 16 states, states ``32 j + 4 (lane % 8) + u``, so the 8 lanes that
  share a channel pair read 128 consecutive bytes of a key row and the other lanes the same bytes (a broadcast);
* each block of ``BT`` = 16 tokens' inputs (float32 keys, squared keys and queries; the CTA's channels of values
  and gains; the log decays) is copied to shared memory by ``cp.async`` a block ahead, one barrier a block;
* rescaled states as the Triton walk's (``M' = e M``, ``J' = e (I - I_prior)``, ``e = exp(s)`` with ``s`` the
  negated log decays since the last renormalisation, renormalised where ``|s|`` would pass 20; the scale goes on
  the channel side, ``v e`` and ``beta e``), the true states at a chunk's start and end;
* on 2 of a lane's 4 groups of states its two channels share one reciprocal (``1 / D0 = D1 / (D0 D1)``, the query
  folded into it): 25 ``MUFU`` a token and lane instead of 33 for 16 more ``FMUL`` (8 more instructions net),
  which keeps the special-function pipe under the issue rate. Its bound: ``D = e I`` with ``e <= e^20``, so
  ``D0 D1`` passes ``2^126`` (where ``rcp.approx.ftz`` flushes the reciprocal to zero, and those states drop out of
  the readout) once the two channels' importances ``I`` (their geometric mean) pass about 1.9e10 (3.8e10: the
  product overflows), against about 1.75e29 for the Triton walk's reciprocal of ``D`` alone (7.0e29: ``D``
  overflows);
* two tokens an iteration, whose four sums (2 tokens x 2 channels) over the 8 lanes take one butterfly.

248 instructions a token and lane in bf16 and fp16, 243.5 in float32 (7.6-7.75 an element-token; the Triton walk
321), 128 registers, two 8-warp CTAs an SM. On an H200
at 2.7b shapes the walk takes 1.78 ms against the Triton walk's 2.03 (bf16, B = 1, L = 8192): the forward 2.09 ms
against 2.34 (docs/bench/nvrtc-walk-2026-11-28). NVRTC comes with PyTorch's CUDA wheels (``nvidia-cuda-nvrtc``);
the kernel is loaded and launched through the driver API with ``ctypes`` on PyTorch's current stream, so nothing
beyond PyTorch is installed. The uncertainty output and float64 inputs stay with the Triton walk; ``auto`` takes
only what the GPU runs checked (bf16, fp16 and float32, head dimensions a multiple of 64 or 32: :func:`wanted`).
"""

import functools

import torch

from . import cuda_build
from .cuda_build import nvrtc  # noqa: F401  (where the tests and records look for it)

# auto (default): where it can run on compute capability 9.x, in AUTO_DTYPES with a head dimension auto_head_dim
# allows; 0: never; 1: wherever it can run
ENV = "PALIMPSA_CUDA_WALK"
# what auto takes, of what the kernel can run: the dtypes and head dimensions that ran on a GPU against float64
# (docs/bench/nvrtc-walk-2026-11-28: bf16 and float32 at P = 64; docs/bench/cuda-local-2026-11-29 call 8: fp16 at
# P = 64, bf16 at P = 32, float32 at P = 128). Other head dimensions below 64 differ from 32 only in the CTA's
# channels, but did not run on a GPU: PALIMPSA_CUDA_WALK=1 asks for them
AUTO_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
AUTO_HEAD_DIM = 64  # auto: head dimensions a multiple of this (64 channels a CTA) ...
AUTO_SMALL_HEAD_DIMS = (32,)  # ... and these (one CTA of P channels)
BLOCK = 16  # tokens a shared-memory stage
PAIR_GROUPS = 2  # groups of 4 states (of a lane's 4) whose two channels share a reciprocal
STATES = 128  # the state size the kernel is written for (every Mamba2 release)
MAX_WARPS = 16  # registers (128 a thread) for 16 warps an SM

SOURCE = cuda_build.HELPERS + r"""
#ifndef PAIRS
#define PAIRS 1  // two tokens an iteration (0: one, each with its own butterfly)
#endif
#ifndef KKC
#define KKC 0  // 1: the keys squared in the walk instead of staged
#endif
#define N 128
#define WARPS (CW / 8)
#define THREADS (WARPS * 32)
#define TAU 20.0f
#define LOG2E 1.4426950408889634f

#if VT_BF16 || VT_F16
typedef unsigned short vt;
#else
typedef float vt;
#endif

struct Stage {
    float k[BT][N];
#if !KKC
    float kk[BT][N];
#endif
    float q[BT][N];
    vt v[BT][CW];
    vt b[BT][CW];
    float g[BT];
};


// a lane's two channels (c, c + 1) of a staged row, as float32
__device__ __forceinline__ void two(const vt* row, float& a, float& b) {
#if VT_BF16
    unsigned w = *(const unsigned*)row;
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
#elif VT_F16
    unsigned w = *(const unsigned*)row;
    unsigned short lo = w & 0xffff, hi = w >> 16;
    asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"(lo));
    asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"(hi));
#else
    float2 f = *(const float2*)row;
    a = f.x; b = f.y;
#endif
}

__device__ __forceinline__ vt to_vt(float x) {
#if VT_BF16
    unsigned short r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x)); return r;
#elif VT_F16
    unsigned short r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x)); return r;
#else
    return x;
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
palimpsa_walk_cuda(const vt* __restrict__ v, const float* __restrict__ k, const float* __restrict__ kk,
                   const float* __restrict__ q, const float* __restrict__ g, const vt* __restrict__ beta,
                   const float* __restrict__ ck_m, const float* __restrict__ ck_i, const float* __restrict__ ip_ptr,
                   vt* __restrict__ y, float* __restrict__ m_out, float* __restrict__ i_out,
                   const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets, int T, int n_chunks)
{
    extern __shared__ __align__(16) unsigned char smem[];
    Stage* st = reinterpret_cast<Stage*>(smem);
    const int c = blockIdx.x, h = blockIdx.y / (P / CW), cb = blockIdx.y % (P / CW), sq = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31, i = ln & 7, cp = ln >> 3;
    const int ig = h / (H / G);
    const Bounds sb = bounds(sq, cu_seqlens, chunk_offsets, T, n_chunks);
    const long long bos = sb.bos, boc = sb.boc;
    const int len = sb.len;
    const int t0 = c * CT;
    const int n_tok = min(CT, len - t0);
    if (n_tok <= 0) return;  // a chunk past its sequence's end (packed sequences of unequal lengths)
    const float ip = *ip_ptr;
    const int ch0 = cb * CW + w * 8 + 2 * cp;  // the lane's first channel in the head

    float M0[16], M1[16], J0[16], J1[16];
    const size_t state = ((size_t)(boc + c) * H + h) * P * N + (size_t)ch0 * N + 4 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 m0 = *(const float4*)(ck_m + state + 32 * j);
        const float4 m1 = *(const float4*)(ck_m + state + N + 32 * j);
        const float4 i0 = *(const float4*)(ck_i + state + 32 * j);
        const float4 i1 = *(const float4*)(ck_i + state + N + 32 * j);
        M0[4 * j] = m0.x; M0[4 * j + 1] = m0.y; M0[4 * j + 2] = m0.z; M0[4 * j + 3] = m0.w;
        M1[4 * j] = m1.x; M1[4 * j + 1] = m1.y; M1[4 * j + 2] = m1.z; M1[4 * j + 3] = m1.w;
        J0[4 * j] = i0.x - ip; J0[4 * j + 1] = i0.y - ip; J0[4 * j + 2] = i0.z - ip; J0[4 * j + 3] = i0.w - ip;
        J1[4 * j] = i1.x - ip; J1[4 * j + 1] = i1.y - ip; J1[4 * j + 2] = i1.z - ip; J1[4 * j + 3] = i1.w - ip;
    }

    // one block of BT tokens' inputs into a stage (tokens past the chunk zero-filled, their addresses the chunk's
    // first token's)
    auto issue = [&](int blk, int slot) {
        Stage& s = st[slot];
        const int tb = t0 + blk * BT, end = t0 + n_tok;
        for (int x = tid; x < BT * N / 4; x += THREADS) {
            const int t = x / (N / 4), col = (x % (N / 4)) * 4;
            const bool ok = tb + t < end;
            const size_t row = (size_t)(bos + (ok ? tb + t : t0)) * G + ig;
            cp16(&s.k[t][col], k + row * N + col, ok);
#if !KKC
            cp16(&s.kk[t][col], kk + row * N + col, ok);
#endif
            cp16(&s.q[t][col], q + row * N + col, ok);
        }
        constexpr int VC = CW * (int)sizeof(vt) / 16;  // 16-byte pieces of the CTA's channels of a token
        for (int x = tid; x < BT * VC; x += THREADS) {
            const int t = x / VC, col = (x % VC) * (16 / (int)sizeof(vt));
            const bool ok = tb + t < end;
            const size_t row = (size_t)(bos + (ok ? tb + t : t0)) * H + h;
            cp16(&s.v[t][col], v + row * P + cb * CW + col, ok);
            cp16(&s.b[t][col], beta + row * P + cb * CW + col, ok);
        }
        if (tid < BT) {
            const bool ok = tb + tid < end;
            cp4(&s.g[tid], g + (size_t)(bos + (ok ? tb + tid : t0)) * H + h, ok);
        }
        commit();
    };

    // one token's update of the lane's states and its partial readouts of its two channels
    auto token = [&](const float* kp, const float* kkp, const float* qp, const vt* vp, const vt* bp, float e,
                     float& a0, float& a1) {
        const float eip = e * ip;
        float v0, v1, b0, b1;
        two(vp, v0, v1);
        two(bp, b0, b1);
        v0 *= e; v1 *= e; b0 *= e; b1 *= e;
        a0 = 0.f; a1 = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float4 K = *(const float4*)(kp + 32 * j);
#if KKC
            const float4 KK = make_float4(K.x * K.x, K.y * K.y, K.z * K.z, K.w * K.w);
#else
            const float4 KK = *(const float4*)(kkp + 32 * j);
#endif
            const float4 Q = *(const float4*)(qp + 32 * j);
            const float kv[4] = {K.x, K.y, K.z, K.w};
            const float kkv[4] = {KK.x, KK.y, KK.z, KK.w};
            const float qv[4] = {Q.x, Q.y, Q.z, Q.w};
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int n = 4 * j + u;
                M0[n] = fmaf(v0, kv[u], M0[n]);
                M1[n] = fmaf(v1, kv[u], M1[n]);
                J0[n] = fmaf(b0, kkv[u], J0[n]);
                J1[n] = fmaf(b1, kkv[u], J1[n]);
                if (j < PAIRRCP) {  // one reciprocal for both channels, the query folded into it
                    const float d0 = J0[n] + eip, d1 = J1[n] + eip;
                    const float qr = qv[u] * rcp(d0 * d1);
                    a0 = fmaf(M0[n] * d1, qr, a0);
                    a1 = fmaf(M1[n] * d0, qr, a1);
                } else {
                    a0 = fmaf(M0[n] * rcp(J0[n] + eip), qv[u], a0);
                    a1 = fmaf(M1[n] * rcp(J1[n] + eip), qv[u], a1);
                }
            }
        }
    };
    // the next token's scale: renormalised first where |s| would pass TAU (the states times the decay since the
    // last renormalisation, this token's included)
    float s = 0.f;
    auto scale = [&](float l) {
        const float gs = s - l;
        if (fabsf(gs) > TAU) {
            const float r = ex2(-gs * LOG2E);
#pragma unroll
            for (int n = 0; n < 16; ++n) { M0[n] *= r; M1[n] *= r; J0[n] *= r; J1[n] *= r; }
            s = 0.f;
        } else {
            s = gs;
        }
        return ex2(s * LOG2E);
    };

    const int n_blk = (n_tok + BT - 1) / BT;
    const bool hi = (ln >> 2) & 1, odd = (ln >> 1) & 1;
    vt* yp = y + (size_t)(bos + t0) * H * P + (size_t)h * P + cb * CW + w * 8 + (ln >> 2);
    issue(0, 0);
    for (int blk = 0; blk < n_blk; ++blk) {
        wait_copies();
        __syncthreads();  // every copy of this block landed, every warp done with the block before
        if (blk + 1 < n_blk) issue(blk + 1, (blk + 1) & 1);
        const Stage& S = st[blk & 1];
        const float* kp = &S.k[0][4 * i];
#if KKC
        const float* kkp = kp;  // unused (the keys squared in the walk); a real row, so its steps below stay defined
#else
        const float* kkp = &S.kk[0][4 * i];
#endif
        const float* qp = &S.q[0][4 * i];
        const vt* vp = &S.v[0][ch0 - cb * CW];
        const vt* bp = &S.b[0][ch0 - cb * CW];
        const float* gp = &S.g[0];
        const int nt = min(BT, n_tok - blk * BT);
        int t = 0;
#if PAIRS
        // two tokens an iteration: their four sums (2 tokens x 2 channels) over the 8 lanes in one butterfly, two
        // reduce-scatter stages (channel, then token) and a full one; lane l ends with token (l >> 1) & 1 of
        // channel l >> 2 of the warp's 8
        for (; t + 1 < nt; t += 2, kp += 2 * N, kkp += 2 * N, qp += 2 * N, vp += 2 * CW, bp += 2 * CW, gp += 2,
                                   yp += 2 * H * P) {
            float a0, a1, c0, c1;
            const float g1 = gp[1];
            token(kp, kkp, qp, vp, bp, scale(gp[0]), a0, a1);
            token(kp + N, kkp + N, qp + N, vp + CW, bp + CW, scale(g1), c0, c1);
            float x = hi ? a1 : a0, z = hi ? c1 : c0;
            const float xs = hi ? a0 : a1, zs = hi ? c0 : c1;
            x += __shfl_xor_sync(0xffffffffu, xs, 4);
            z += __shfl_xor_sync(0xffffffffu, zs, 4);
            float keep = odd ? z : x;
            const float send = odd ? x : z;
            keep += __shfl_xor_sync(0xffffffffu, send, 2);
            keep += __shfl_xor_sync(0xffffffffu, keep, 1);
            if ((ln & 1) == 0) yp[odd ? H * P : 0] = to_vt(keep);
        }
#endif
        for (; t < nt; ++t, kp += N, kkp += N, qp += N, vp += CW, bp += CW, ++gp, yp += H * P) {
            float a0, a1;
            token(kp, kkp, qp, vp, bp, scale(*gp), a0, a1);
            float keep = hi ? a1 : a0;
            const float send = hi ? a0 : a1;
            keep += __shfl_xor_sync(0xffffffffu, send, 4);
            keep += __shfl_xor_sync(0xffffffffu, keep, 2);
            keep += __shfl_xor_sync(0xffffffffu, keep, 1);
            if ((ln & 3) == 0) *yp = to_vt(keep);
        }
    }
#if STORE_FINAL
    if (t0 + n_tok == len) {  // the sequence's last chunk: its true end state
        const float r = ex2(-s * LOG2E);
        const size_t out = ((size_t)sq * H + h) * P * N + (size_t)ch0 * N + 4 * i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            *(float4*)(m_out + out + 32 * j) = make_float4(M0[4 * j] * r, M0[4 * j + 1] * r, M0[4 * j + 2] * r,
                                                           M0[4 * j + 3] * r);
            *(float4*)(m_out + out + N + 32 * j) = make_float4(M1[4 * j] * r, M1[4 * j + 1] * r,
                                                               M1[4 * j + 2] * r, M1[4 * j + 3] * r);
            *(float4*)(i_out + out + 32 * j) = make_float4(fmaf(J0[4 * j], r, ip), fmaf(J0[4 * j + 1], r, ip),
                                                           fmaf(J0[4 * j + 2], r, ip), fmaf(J0[4 * j + 3], r, ip));
            *(float4*)(i_out + out + N + 32 * j) = make_float4(fmaf(J1[4 * j], r, ip), fmaf(J1[4 * j + 1], r, ip),
                                                               fmaf(J1[4 * j + 2], r, ip),
                                                               fmaf(J1[4 * j + 3], r, ip));
        }
    }
#endif
}
"""

KERNEL = "palimpsa_walk_cuda"
# why the kernel failed to compile or load under "auto" in this process (it then leaves every walk to Triton);
# chunked_fwd.chunked_forward sets it. A launch error leaves only its own call to Triton, and running out of memory
# raises, as it would in the Triton walk
FAILED = None
POISON_OUTPUTS = False  # y filled with NaN before the launch (checks that every element is written)


def channels_per_cta(head_dim: int) -> int:
    """The channels a CTA walks: 64 where they divide ``P``, else ``P`` itself where it is a multiple of 8 below 64;
    0 where neither holds (the Triton walk runs)."""
    if head_dim % 64 == 0:
        return 64
    return head_dim if head_dim % 8 == 0 and head_dim < 64 else 0


def stage_bytes(dtype: torch.dtype, channels: int, block: int = BLOCK, square_keys: int = 0) -> int:
    """The dynamic shared memory of a CTA: two stages of ``block`` tokens (keys, squared keys unless the walk squares
    them, and queries as 128 float32 each; the CTA's ``channels`` of values and gains; the log decays)."""
    rows = 3 - int(square_keys)
    return 2 * block * (rows * STATES * 4 + 2 * channels * (4 if dtype == torch.float32 else 2) + 4)


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  store_final: bool = False, arch: str = "sm_90a", pair_groups: int = PAIR_GROUPS,
                  block: int = BLOCK, channels: int = 0, pairs: int = 1, square_keys: int = 0,
                  min_blocks: int = 0) -> bytes:
    """The walk compiled for ``arch`` (a CPU is enough): the cubin's bytes. The keywords after ``arch`` are the
    shipped choices by default; docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py times the others (``channels`` a CTA,
    ``pairs`` 0: one token an iteration, ``square_keys``, ``min_blocks``: the CTAs an SM the registers are capped
    for, 0 for as many as 16 warps make)."""
    channels = channels or channels_per_cta(head_dim)
    flag = {torch.bfloat16: "VT_BF16", torch.float16: "VT_F16"}.get(dtype, "VT_F32")
    options = [f"--gpu-architecture={arch}", "-std=c++17", f"-D{flag}=1", f"-DH={heads}", f"-DG={groups}",
               f"-DP={head_dim}", f"-DCW={channels}", f"-DCT={chunk}", f"-DBT={block}",
               f"-DMINB={min_blocks or max(1, MAX_WARPS // (channels // 8))}", f"-DPAIRRCP={pair_groups}",
               f"-DVARLEN={int(varlen)}", f"-DSTORE_FINAL={int(store_final)}", f"-DPAIRS={int(pairs)}",
               f"-DKKC={int(square_keys)}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_walk.cu", options, "the walk")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, varlen: bool,
            store_final: bool, variant: tuple = ()):
    """The loaded kernel, its shared-memory size and channels a CTA, compiled once per process and device for these
    sizes (``variant``: :func:`compile_cubin`'s keywords as sorted pairs)."""
    options = dict(variant)
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, store_final=store_final,
                          arch=cuda_build.arch(device), **options)
    channels = options.get("channels") or channels_per_cta(head_dim)
    smem = stage_bytes(dtype, channels, options.get("block", BLOCK), options.get("square_keys", 0))
    return cuda_build.load(device, cubin, KERNEL, smem), smem, channels


def unsupported(v: torch.Tensor, k: torch.Tensor, beta, output_uncertainty: bool) -> str | None:
    """Why the CUDA walk cannot take these inputs (None where it can)."""
    if not v.is_cuda:
        return "not a CUDA tensor"
    if v.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"{v.dtype} inputs"
    if beta is None or beta.dtype != v.dtype:
        return "beta absent or in another dtype than v"
    if output_uncertainty:
        return "the uncertainty output"
    if k.shape[-1] != STATES:
        return f"{k.shape[-1]} states (the kernel is written for {STATES})"
    if not channels_per_cta(v.shape[-1]):
        return f"head dimension {v.shape[-1]} (a multiple of 64, or of 8 below 64)"
    if torch.cuda.get_device_capability(v.device)[0] < 8:
        return "compute capability below 8.0 (cp.async)"
    if nvrtc() is None:
        return "no libnvrtc"
    return None


def mode(config: dict) -> str:
    """``config["walk_CUDA"]``, else ``PALIMPSA_CUDA_WALK``, else ``auto``, as one of ``auto``, ``on``, ``off``
    (``walk_CUDA`` None counts as unset)."""
    return cuda_build.switch(config, "walk_CUDA", ENV, "auto")


def triton_walk_keys(config: dict) -> list:
    """The keys of ``config`` that tile the Triton walk (``walk_BV``, ``walk_SCATTER``, ...: every ``walk_*`` key
    but ``walk_CUDA``), which this kernel has no use for."""
    return sorted(key for key in config if key.startswith("walk_") and key != "walk_CUDA")


def wanted(v: torch.Tensor, k: torch.Tensor, beta, output_uncertainty: bool, config: dict) -> bool:
    """Whether the chunked forward walks its chunks with this kernel (``config`` as the caller gave it):
    :func:`mode` ``auto`` (the default) where it can run on compute capability 9.x, the GPUs it was measured on, in
    ``AUTO_DTYPES`` (bf16, fp16, float32) with a head dimension a multiple of ``AUTO_HEAD_DIM`` (64) or in
    ``AUTO_SMALL_HEAD_DIMS`` (32), the inputs its GPU checks ran, unless the config names a key of the Triton walk's
    tiling (``walk_BV``, ``walk_SCATTER``, ...) or its compile or load has failed in this process (``FAILED``);
    ``on`` wherever it can run, the other head dimensions below 64 included (else an error saying why, and an error
    where the config also names the Triton walk's keys, which it would ignore); ``off`` never."""
    chosen = mode(config)
    if chosen == "off":
        return False
    if chosen == "on" and triton_walk_keys(config):
        raise ValueError(f"walk_CUDA / {ENV} = 1 asks for the CUDA chunk walk, which ignores the Triton walk's keys "
                         f"{', '.join(triton_walk_keys(config))}: drop them, or set walk_CUDA to 0 for the Triton walk")
    reason = unsupported(v, k, beta, output_uncertainty)
    if chosen == "on":
        if reason is not None:
            raise ValueError(f"the CUDA chunk walk cannot run here ({reason}); use {ENV}=auto or 0")
        return True
    return (reason is None and not triton_walk_keys(config) and FAILED is None
            and v.dtype in AUTO_DTYPES
            and (v.shape[-1] % AUTO_HEAD_DIM == 0 or v.shape[-1] in AUTO_SMALL_HEAD_DIMS)
            and torch.cuda.get_device_capability(v.device)[0] == 9)


def walk(v, k32, q32, log_decay, beta, ck_m, ck_i, ip, cu_seqlens, offsets, n_chunks, n_states, max_chunks,
         chunk_size, output_final_state, variant: dict | None = None):
    """``y, M_T, I_T`` (the last two None unless ``output_final_state``) walked from the checkpoints ``ck_m``,
    ``ck_i`` (``chunked_fwd.py``'s), with float32 keys and queries ``k32``, ``q32``; ``variant``: keywords of
    :func:`compile_cubin` other than the shipped ones (the benchmark record's)."""
    batch, length, heads, head_dim = v.shape
    groups = k32.shape[2]
    varlen = cu_seqlens is not None
    func, smem, channels = _kernel(v.device.index if v.device.index is not None else torch.cuda.current_device(),
                                   v.dtype, heads, groups, head_dim, chunk_size, varlen, output_final_state,
                                   tuple(sorted((variant or {}).items())))
    v, beta, k32, q32 = (cuda_build.aligned(t) for t in (v, beta, k32, q32))
    log_decay = log_decay.float().contiguous()
    kk32 = k32 * k32
    y = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if POISON_OUTPUTS:
        y.fill_(float("nan"))
    m_t = i_t = None
    if output_final_state:
        m_t = torch.empty((n_states, heads, head_dim, STATES), dtype=torch.float32, device=v.device)
        i_t = torch.empty_like(m_t)
    if n_states == 0:  # an empty batch: nothing to walk (an empty grid is a launch error)
        return y, m_t, i_t
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k32, kk32, q32, log_decay, beta, ck_m, ck_i, ip, y, m_t if output_final_state else y,
               i_t if output_final_state else y, cu_seqlens.to(torch.int32) if varlen else empty,
               offsets.to(torch.int32) if varlen else empty]
    cuda_build.launch(func, v.device, (max_chunks, heads * (head_dim // channels), n_states), channels // 8 * 32, smem,
                      tensors, [length, n_chunks // max(1, n_states) if not varlen else 0])
    return y, m_t, i_t
