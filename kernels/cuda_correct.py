"""The chunk-parallel backward's corrections in CUDA C++, compiled at run time by NVRTC, on tensor cores
(docs/kernels.md, "The corrections in CUDA C++").

After the local pass (every chunk walked from a zero adjoint at its end) and the carry (the adjoint ``(E_M, E_I)``
entering every chunk at its end), each chunk's outputs take a correction affine in ``E`` (``emulation.
chunk_parallel_backward``, step 3). With ``A_t`` the decays after token ``t`` to the chunk's end::

    dv_t    += A_t E_M k_t              dbeta_t += A_t E_I k_t^2
    dk_t    += A_t (E_M^T v_t + 2 k_t (E_I^T beta_t))
    dlog_decay_t += D0 + sum_{r < t} A_r (v_r . E_M k_r + beta_r . E_I k_r^2)

where ``D0 = exp(sum of the chunk's log decays) (<E_M, M_start> + <E_I, I_start - I_prior>)`` from the chunk's
checkpoint: the decay gradient ``a_t A_t <E, S_{t-1}>`` written as a prefix sum (``emulation.corrections_chunk``).
Every decay is the exponential of a sum of log decays over exactly the tokens it spans (suffix sums taken directly,
never as differences of running sums).

The kernel:

* a CTA of 8 warps a (chunk, head, block of 64 channels); warp ``w`` keeps ``E`` as tensor-core B fragments in its
  registers for the whole chunk: ``E_M^T``, ``E_I^T`` over its 8 channels (for ``dv``, ``dbeta``) and ``E_M``,
  ``E_I`` over its 16 states (for ``dk``), 128 registers a lane;
* the chunk's tokens 32 at a time: keys, values, gains and the local pass's ``dv``, ``dbeta`` copied by ``cp.async``
  into one of two buffers while the tile before computes; keys, values and gains widened once into A fragments
  (TF32) that every warp reads; squared keys formed in registers;
* a tile's products ``mma.m16n8k8`` TF32: 64 a warp and 16 tokens (``K E_M^T``, ``K^2 E_I^T`` over 16 k-steps,
  ``V E_M``, ``B E_I`` over 8 for two state tiles); ``dv``, ``dbeta`` read from the copies, corrected and stored;
  ``dk`` by four-state vector atomics (``red.global.add.v4.f32``); each token's ``v . E_M k + beta . E_I k^2`` summed
  over the warp's channels into shared memory;
* at the chunk's end, the decay gradients as an exclusive prefix sum over the CTA, one atomic a token.

Precision: TF32 products (10 bits of mantissa; 16-bit keys, values and gains are exact, squared keys and ``E`` are
rounded), as the Triton corrections' ``tl.dot`` in TF32 for these inputs.

Scope (:func:`unsupported`): compute capability 9.x, bf16, fp16 or float32 values, gains (and their gradients) of one
dtype, keys in theirs (float32 anywhere only where TF32 is allowed), 128 states, ``P`` a multiple of 64, chunks a
multiple of 32 tokens up to 512 (the default 512 checked on a GPU), gains present. ``chunked_bwd`` takes it under
``CORRECT`` "auto" where it can run.
"""

import functools

import torch

from . import cuda_build
from .cuda_build import dtype_options, nvrtc

STATES = 128
CHANNELS = 64  # a CTA's channels
TILE = 32  # tokens a tile
THREADS = 256
# the longest chunk: its decays and the warps' shares of the decay gradient take 36 bytes a token of shared memory, and
# a thread's share of the decay sums grows with it (ptxas spills a few registers from 1024 tokens)
MAX_CHUNK = 512
KERNEL = "palimpsa_bwd_correct_cuda"
# 1 (the default): each thread's copies of a tile at fixed offsets (loops of known trip count: 2,280-2,328 SASS
# instructions against 2,928-3,040 in docs/bench/fixcp-2026-11-29/sass_counts.txt; checked on an H200 and 1.7% faster,
# docs/bench/fixcp-2026-11-29/call1); 0: the general loop
FIXCP = 1

SOURCE = cuda_build.HELPERS + cuda_build.TENSOR_CORE_HELPERS + r"""
#define N 128
#define CW 64
#define THREADS 256
#define TT 32
#define LOG2E 1.4426950408889634f
#ifndef ORDER
#define ORDER 0                 // the CTAs' order: 0 heads first (a chunk's heads run at once), 1 chunks first
#endif

// vt: values, gains (and dv, dbeta); kt: keys (cuda_build.TENSOR_CORE_HELPERS)
#define KROW (N + KPC)              // a key row in shared memory: 16 bytes of padding, so that the 8 row groups of a
#define VROW (CW + VPC)             // fragment read fall in different banks
#define TPT ((CT + THREADS - 1) / THREADS)  // tokens a thread in the decay sums

struct Raw {                    // a tile's inputs as copied
    kt k[TT][KROW];
    vt v[TT][VROW];
    vt b[TT][VROW];
    vt dv[TT][VROW];            // the local pass's dv, dbeta
    vt db[TT][VROW];
};
struct Shared {
    Raw raw[2];
    float4 fk[2][16][32];       // keys as A fragments [16-token half][k-step][lane], TF32
    float4 fv[2][8][32];        // values
    float4 fb[2][8][32];        // gains
    float A[CT];                // the decays after each token to the chunk's end
    float part[8][CT];          // warp w's channels' share of each token's v . E_M k + beta . E_I k^2
    float red[8];
};

__device__ __forceinline__ float4 tf32x4(float a, float b, float c, float d) {
    return make_float4(__uint_as_float(tf32(a)), __uint_as_float(tf32(b)), __uint_as_float(tf32(c)),
                       __uint_as_float(tf32(d)));
}
// two neighbouring elements stored at once
__device__ __forceinline__ void store2(vt* p, float x, float y) {
#if VT_F32
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
    unsigned short a, b;
#if VT_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(a) : "f"(x));
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(y));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(x));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(y));
#endif
    *reinterpret_cast<unsigned*>(p) = (unsigned)a | ((unsigned)b << 16);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
palimpsa_bwd_correct_cuda(const vt* __restrict__ v, const kt* __restrict__ k, const float* __restrict__ g,
                          const vt* __restrict__ beta, const float* __restrict__ ip_ptr,
                          const float* __restrict__ ck_m, const float* __restrict__ ck_i,
                          const float* __restrict__ lm, const float* __restrict__ li,
                          const float* __restrict__ dmT, const float* __restrict__ diT,
                          vt* __restrict__ dv, float* __restrict__ dk, float* __restrict__ dg,
                          vt* __restrict__ dbeta, const int* __restrict__ cu_seqlens,
                          const int* __restrict__ chunk_offsets, const int* __restrict__ chunk_seq,
                          int T, int seq_chunks, int n_ck)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31;
    const int gq = ln >> 2, tq = ln & 3;
    constexpr int PB = P / CW;
#if ORDER
    const int i_ck = blockIdx.x % n_ck, hb = blockIdx.x / n_ck;
#else
    const int hb = blockIdx.x % (H * PB), i_ck = blockIdx.x / (H * PB);
#endif
    const int h = hb / PB, cb = hb % PB, ig = h / (H / G);
#if VARLEN
    const int sq = chunk_seq[i_ck];
#else
    const int sq = i_ck / seq_chunks;
#endif
    const Bounds sb = bounds(sq, cu_seqlens, chunk_offsets, T, seq_chunks);
    const long long bos = sb.bos, boc = sb.boc;
    const int c = (int)(i_ck - boc), t0 = c * CT;
    const int n = min(CT, sb.len - t0);
    const bool last = t0 + CT >= sb.len;
    if (n <= 0 || (last && !USE_FINAL)) return;  // the last chunk's entering adjoint: the final-state gradient or 0
    const float ip = *ip_ptr;
    // the entering adjoint's [64, N] block: a slot for every chunk but each sequence's last
    const long long slot0 = boc - sq > 0 ? boc - sq : 0;
    const size_t eo = (last ? (size_t)sq * H + h : (size_t)(slot0 + c) * H + h) * P * N + (size_t)cb * CW * N;
    const float* em = (last ? dmT : lm) + eo;
    const float* ei = (last ? diT : li) + eo;
    const size_t co = ((size_t)i_ck * H + h) * P * N + (size_t)cb * CW * N;

    auto copy_in = [&](int i, int buf) {  // tile i's inputs into buffer buf (tokens past the chunk zero-filled)
        Raw& rw = sh.raw[buf];
        const int tb = t0 + i * TT, end = t0 + n;
#pragma unroll
        PIECES(f, TT * N / KPC) {
            const int t = f / (N / KPC), col = (f % (N / KPC)) * KPC;
            const bool ok = tb + t < end;
            cp16(&rw.k[t][col], k + ((size_t)(bos + (ok ? tb + t : t0)) * G + ig) * N + col, ok);
        }
#pragma unroll
        PIECES(f, TT * CW / VPC) {
            const int t = f / (CW / VPC), col = (f % (CW / VPC)) * VPC;
            const bool ok = tb + t < end;
            const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * H + h) * P + cb * CW + col;
            cp16(&rw.v[t][col], v + row, ok);
            cp16(&rw.b[t][col], beta + row, ok);
            cp16(&rw.dv[t][col], dv + row, ok);
            cp16(&rw.db[t][col], dbeta + row, ok);
        }
        commit();
    };
    copy_in(0, 0);

    // the adjoint as B fragments (lane g = gq, t = tq): for dv, dbeta the warp's channels 8 w + g against states
    // 8 s + t, 8 s + t + 4 (s the k-step); for dk channels 8 s + t, 8 s + t + 4 against the warp's states
    // 16 w + 8 j + g (j its two state tiles)
    unsigned emt[16][2], eit[16][2], emn[8][2][2], ein[8][2][2];
#pragma unroll
    for (int s = 0; s < 16; ++s)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int o = (8 * w + gq) * N + 8 * s + tq + 4 * e;
            emt[s][e] = tf32(em[o]);
            eit[s][e] = tf32(ei[o]);
        }
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int o = (8 * s + tq + 4 * e) * N + 16 * w + 8 * j + gq;
                emn[s][j][e] = tf32(em[o]);
                ein[s][j][e] = tf32(ei[o]);
            }
    // <E_M, M_start> + <E_I, I_start - I_prior> over the block, from the chunk's checkpoint
    float run = 0.f;
#pragma unroll
    for (int r = 0; r < CW * N / 4 / THREADS; ++r) {
        const int o = 4 * (tid + r * THREADS);
        const float4 a = *reinterpret_cast<const float4*>(em + o), b = *reinterpret_cast<const float4*>(ei + o);
        const float4 x = *reinterpret_cast<const float4*>(ck_m + co + o);
        const float4 y = *reinterpret_cast<const float4*>(ck_i + co + o);
        run = fmaf(a.x, x.x, fmaf(a.y, x.y, fmaf(a.z, x.z, fmaf(a.w, x.w, run))));
        run = fmaf(b.x, y.x - ip, fmaf(b.y, y.y - ip, fmaf(b.z, y.z - ip, fmaf(b.w, y.w - ip, run))));
    }
    // the decays after each token: suffix sums of the log decays, thread i holding tokens TPT i .. TPT i + TPT - 1
    float gl[TPT];
    float own = 0.f;
#pragma unroll
    for (int j = 0; j < TPT; ++j) {
        const int t = TPT * tid + j;
        gl[j] = t < n ? g[(size_t)(bos + t0 + t) * H + h] : 0.f;
        own += gl[j];
    }
    float incl = own;  // the sum over this lane's tokens and the warp's later lanes'
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_down_sync(0xffffffffu, incl, o);
        if (ln + o < 32) incl += y;
    }
    float later = __shfl_down_sync(0xffffffffu, incl, 1);  // the warp's later lanes' (not a difference)
    if (ln == 31) later = 0.f;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) run += __shfl_xor_sync(0xffffffffu, run, o);
    if (ln == 0) sh.red[w] = incl;
    __syncthreads();
    float after = later, total = 0.f;
#pragma unroll
    for (int x = 0; x < 8; ++x) {
        total += sh.red[x];
        if (x > w) after += sh.red[x];
    }
#pragma unroll
    for (int j = TPT - 1; j >= 0; --j) {
        const int t = TPT * tid + j;
        if (t < CT) sh.A[t] = ex2(after * LOG2E);
        after += gl[j];
    }
    __syncthreads();  // (every warp done reading red)
    if (ln == 0) sh.red[w] = run;
    __syncthreads();
    float d0 = 0.f;
#pragma unroll
    for (int x = 0; x < 8; ++x) d0 += sh.red[x];
    d0 *= ex2(total * LOG2E);  // the checkpoint's part, decayed over the whole chunk

    const int n_tiles = (n + TT - 1) / TT;
    for (int i = 0; i < n_tiles; ++i) {
        const int buf = i & 1;
        const Raw& rw = sh.raw[buf];
        wait_copies();
        __syncthreads();  // tile i landed; every warp done with tile i - 1 (its buffer and the fragments)
        if (i + 1 < n_tiles) copy_in(i + 1, buf ^ 1);
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // keys: 2 x 16 x 32 fragments
            const int f = tid + r * THREADS, mt = f >> 9, s = (f >> 5) & 15, l = f & 31;
            const int row = 16 * mt + (l >> 2), col = 8 * s + (l & 3);
            sh.fk[mt][s][l] = tf32x4(widen_k(rw.k[row][col]), widen_k(rw.k[row + 8][col]),
                                     widen_k(rw.k[row][col + 4]), widen_k(rw.k[row + 8][col + 4]));
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {  // values and gains: 2 x 8 x 32 each
            const int f = tid + r * THREADS, mt = f >> 8, s = (f >> 5) & 7, l = f & 31;
            const int row = 16 * mt + (l >> 2), col = 8 * s + (l & 3);
            sh.fv[mt][s][l] = tf32x4(widen(rw.v[row][col]), widen(rw.v[row + 8][col]), widen(rw.v[row][col + 4]),
                                     widen(rw.v[row + 8][col + 4]));
            sh.fb[mt][s][l] = tf32x4(widen(rw.b[row][col]), widen(rw.b[row + 8][col]), widen(rw.b[row][col + 4]),
                                     widen(rw.b[row + 8][col + 4]));
        }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            float p1[4] = {0.f, 0.f, 0.f, 0.f}, p2[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                const float4 a = sh.fk[mt][s][ln];
                const float4 aa = tf32x4(a.x * a.x, a.y * a.y, a.z * a.z, a.w * a.w);
                mma(p1, a, emt[s][0], emt[s][1]);
                mma(p2, aa, eit[s][0], eit[s][1]);
            }
            float p3[2][4] = {}, p4[2][4] = {};
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                const float4 av = sh.fv[mt][s][ln], ab = sh.fb[mt][s][ln];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    mma(p3[j], av, emn[s][j][0], emn[s][j][1]);
                    mma(p4[j], ab, ein[s][j][0], ein[s][j][1]);
                }
            }
            // the lane's tokens ra, rb (of the tile) and their place in the chunk
            const int ra = 16 * mt + gq, rb = ra + 8, ta = i * TT + ra, tb = ta + 8;
            const float Aa = sh.A[ta], Ab = sh.A[tb];
            const int ch = 8 * w + 2 * tq;  // the lane's two channels of dv, dbeta
            const float va0 = widen(rw.v[ra][ch]), va1 = widen(rw.v[ra][ch + 1]);
            const float vb0 = widen(rw.v[rb][ch]), vb1 = widen(rw.v[rb][ch + 1]);
            const float ba0 = widen(rw.b[ra][ch]), ba1 = widen(rw.b[ra][ch + 1]);
            const float bb0 = widen(rw.b[rb][ch]), bb1 = widen(rw.b[rb][ch + 1]);
            float adda = va0 * p1[0] + va1 * p1[1] + ba0 * p2[0] + ba1 * p2[1];
            float addb = vb0 * p1[2] + vb1 * p1[3] + bb0 * p2[2] + bb1 * p2[3];
            adda += __shfl_xor_sync(0xffffffffu, adda, 1);
            addb += __shfl_xor_sync(0xffffffffu, addb, 1);
            adda += __shfl_xor_sync(0xffffffffu, adda, 2);
            addb += __shfl_xor_sync(0xffffffffu, addb, 2);
            if (tq == 0) { sh.part[w][ta] = adda; sh.part[w][tb] = addb; }
            const size_t rowa = ((size_t)(bos + t0 + ta) * H + h) * P + cb * CW + ch;
            const size_t rowb = ((size_t)(bos + t0 + tb) * H + h) * P + cb * CW + ch;
            if (ta < n) {
                store2(dv + rowa, widen(rw.dv[ra][ch]) + Aa * p1[0], widen(rw.dv[ra][ch + 1]) + Aa * p1[1]);
                store2(dbeta + rowa, widen(rw.db[ra][ch]) + Aa * p2[0], widen(rw.db[ra][ch + 1]) + Aa * p2[1]);
            }
            if (tb < n) {
                store2(dv + rowb, widen(rw.dv[rb][ch]) + Ab * p1[2], widen(rw.dv[rb][ch + 1]) + Ab * p1[3]);
                store2(dbeta + rowb, widen(rw.db[rb][ch]) + Ab * p2[2], widen(rw.db[rb][ch + 1]) + Ab * p2[3]);
            }
            // dk of states st, st + 1 (st = 16 w + 8 j + 2 t): lanes t, t ^ 1 swap halves, so that an even lane adds
            // token ra's states st .. st + 3 and an odd one token rb's st - 2 .. st + 1
            const bool odd = tq & 1;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int st = 16 * w + 8 * j + 2 * tq;
                const float d0a = Aa * (p3[j][0] + 2.f * widen_k(rw.k[ra][st]) * p4[j][0]);
                const float d1a = Aa * (p3[j][1] + 2.f * widen_k(rw.k[ra][st + 1]) * p4[j][1]);
                const float d0b = Ab * (p3[j][2] + 2.f * widen_k(rw.k[rb][st]) * p4[j][2]);
                const float d1b = Ab * (p3[j][3] + 2.f * widen_k(rw.k[rb][st + 1]) * p4[j][3]);
                const float x0 = __shfl_xor_sync(0xffffffffu, odd ? d0a : d0b, 1);
                const float x1 = __shfl_xor_sync(0xffffffffu, odd ? d1a : d1b, 1);
                if (!odd) {
                    if (ta < n) red_add4(dk + ((size_t)(bos + t0 + ta) * G + ig) * N + st, d0a, d1a, x0, x1);
                } else {
                    if (tb < n) red_add4(dk + ((size_t)(bos + t0 + tb) * G + ig) * N + st - 2, x0, x1, d0b, d1b);
                }
            }
        }
    }
    __syncthreads();  // every tile's part written
    // the decay gradients: D0 plus the exclusive prefix sum of A_r (v_r . E_M k_r + beta_r . E_I k_r^2)
    float con[TPT];
    float mine = 0.f;
#pragma unroll
    for (int j = 0; j < TPT; ++j) {
        const int t = TPT * tid + j;
        float x = 0.f;
        if (t < n) {
#pragma unroll
            for (int y = 0; y < 8; ++y) x += sh.part[y][t];
            x *= sh.A[t];
        }
        con[j] = x;
        mine += x;
    }
    float pre = mine;  // inclusive over the warp's lanes up to this one
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, pre, o);
        if (ln >= o) pre += y;
    }
    float before = __shfl_up_sync(0xffffffffu, pre, 1);
    if (ln == 0) before = 0.f;
    __syncthreads();  // (every warp done reading red)
    if (ln == 31) sh.red[w] = pre;
    __syncthreads();
    float acc = d0 + before;
#pragma unroll
    for (int x = 0; x < 8; ++x)
        if (x < w) acc += sh.red[x];
#pragma unroll
    for (int j = 0; j < TPT; ++j) {
        const int t = TPT * tid + j;
        if (t < n) red_add(dg + (size_t)(bos + t0 + t) * H + h, acc);
        acc += con[j];
    }
}
"""


def shared_bytes(dtype: torch.dtype = torch.bfloat16, key_dtype: torch.dtype | None = None,
                 chunk: int = 512) -> int:
    """The dynamic shared memory of a CTA: two buffers of a tile's copies (keys in ``key_dtype``, values, gains and
    the local ``dv``, ``dbeta`` in ``dtype``, each row padded by 16 bytes), the widened A fragments, the decays after
    each token and the warps' shares of the decay gradient's terms (``chunk`` tokens each), and 8 floats."""
    key_dtype = key_dtype or dtype
    raw = TILE * (STATES * key_dtype.itemsize + 16) + 4 * TILE * (CHANNELS * dtype.itemsize + 16)
    fragments = (2 * 16 + 2 * 2 * 8) * 32 * 16
    return 2 * raw + fragments + 9 * chunk * 4 + 8 * 4


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  final: bool = False, arch: str = "sm_90a", key_dtype: torch.dtype | None = None,
                  order: int = 0, fixcp: int | None = None) -> bytes:
    """The corrections compiled for ``arch`` (a CPU is enough): the cubin's bytes (``final``: the last chunk's
    entering adjoint is a final-state gradient; ``order``: the source's ``ORDER``; ``fixcp``: its ``FIXCP``,
    ``FIXCP`` where None)."""
    options = [f"--gpu-architecture={arch}", "-std=c++17", *dtype_options(dtype, key_dtype), f"-DH={heads}",
               f"-DG={groups}", f"-DP={head_dim}", f"-DCT={chunk}", f"-DVARLEN={int(varlen)}",
               f"-DUSE_FINAL={int(final)}", f"-DORDER={order}", f"-DFIXCP={FIXCP if fixcp is None else fixcp}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_bwd_correct.cu", options, "the corrections")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, varlen: bool,
            final: bool, key_dtype: torch.dtype, order: int = 0, fixcp: int | None = None):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, final=final,
                          arch=cuda_build.arch(device), key_dtype=key_dtype, order=order, fixcp=fixcp)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes(dtype, key_dtype, chunk))


def unsupported(v, k, beta, chunk_size: int) -> str | None:
    """Why the CUDA corrections cannot take these inputs (None where they can)."""
    reason = cuda_build.tensor_core_reason(v, k, beta, STATES, CHANNELS, "its products")
    if reason is not None:
        return reason
    if chunk_size % TILE or chunk_size > MAX_CHUNK:
        return f"chunk size {chunk_size} (a multiple of {TILE}, at most {MAX_CHUNK})"
    if torch.cuda.get_device_capability(v.device)[0] != 9:
        return "compute capability other than 9.x"
    if nvrtc() is None:
        return "no libnvrtc"
    return None


def launch(v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t, di_t, dv, dk, dg, dbeta, cu_seqlens, offsets,
           chunk_seq, n_chunks, chunk_size, use_final_grad: bool, order: int = 0):
    """The corrections into the chunked backward's buffers (``dv``, ``dbeta`` corrected in place; ``dk``, ``dg``
    added to), from the carry's entering adjoints in ``lm``, ``li`` (and ``dm_t``, ``di_t`` for each sequence's last
    chunk where ``use_final_grad``). ``chunk_seq``: each checkpoint's sequence (packed sequences only)."""
    batch, length, heads, head_dim = v.shape
    groups = k.shape[2]
    varlen = cu_seqlens is not None
    n_ctas = n_chunks * heads * (head_dim // CHANNELS)
    if n_ctas == 0:
        return
    device = v.device.index if v.device.index is not None else torch.cuda.current_device()
    func = _kernel(device, v.dtype, heads, groups, head_dim, chunk_size, varlen, use_final_grad, k.dtype, order, FIXCP)
    for name, t in (("dv", dv), ("dbeta", dbeta)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"the corrections write {name} in place: it must be contiguous and 16-byte aligned")
    v, k, beta = (cuda_build.aligned(t) for t in (v, k, beta))
    log_decay = log_decay.float().contiguous()
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t if use_final_grad else None,
               di_t if use_final_grad else None, dv, dk, dg, dbeta,
               cu_seqlens.to(torch.int32) if varlen else empty, offsets.to(torch.int32) if varlen else empty,
               chunk_seq if varlen else empty]
    seq_chunks = 0 if varlen else -(-length // chunk_size)
    cuda_build.launch(func, v.device, (n_ctas, 1, 1), THREADS, shared_bytes(v.dtype, k.dtype, chunk_size), tensors,
                      [length, seq_chunks, n_chunks])
