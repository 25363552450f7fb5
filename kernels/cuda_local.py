"""The chunk-parallel backward's local pass in CUDA C++, compiled at run time by NVRTC (docs/kernels.md, "The local
pass in CUDA C++").

``chunked_bwd.py``'s first launch walks every chunk backwards from a zero adjoint at its end and writes the tokens'
local ``dv``, ``dbeta``, adds their ``dk``, ``dq``, ``dlog_decay``, and stores the chunk's local adjoint at its start
for the carry. The Triton and Gluon passes give a warp 4 channels of a head, so every sum over the channels (``dq``,
``dk``) leaves the warp by atomics, and each token's inputs are loaded and unpacked for every 4 channels. This kernel
does the same pass with the mapping chosen by hand:

* a CTA takes one (sequence, head, chunk, block of 64 channels) at a time (persistent CTAs, one an SM), 8 warps;
  warp ``w`` holds states ``16 w .. 16 w + 15`` of all 64 channels, a lane 8 channels x 4 states, so ``dq`` and
  ``dk`` are summed inside the warp (a reduce-scatter butterfly of 7 shuffles, one atomic a lane and token, 16x
  fewer than 4-channel programs make), and ``dv``, ``dbeta`` over 4 lanes and then the 8 warps through shared
  memory (one barrier a token);
* the decay gradient from the token's own state, ``a_t <dM_t, M_{t-1}> = <dM_t, M_t> - v . dv`` (likewise ``J``),
  so no previous state is kept;
* the recompute: pass A walks the chunk from its checkpoint and keeps every ``SEG``-th state in a global slab (one
  per CTA, as the other passes keep one per program); pass B takes the segments from the last, walks each from its
  start once storing the starts of its sub-blocks of ``SUB`` tokens in shared memory (three 64 KB slots), and walks
  each token of a sub-block from the sub-block's start: 1 + 0.75 + 2.5 state updates a token;
* walks in rescaled states (``M' = M / A``, ``J' = (I - I_prior) / A``, ``A`` the decay since the walk's start,
  renormalised where ``-log A`` would pass 20; a token whose own log decay would pass it is applied plainly), and the
  reverse step on the rescaled states as they are: ``M / I = M' / (J' + I_prior / A)``, the output gradient times
  ``1 / A``;
* each segment's inputs (16-bit keys, queries, values, gains, output gradients; the log decays) copied to shared
  memory by ``cp.async`` at its start, the next segment's asked for in L2.

Scope (:func:`unsupported` names what it refuses): compute capability 9.x, bf16 or fp16 inputs of one dtype, 128
states, ``P`` a multiple of 64, no uncertainty gradient. Correct, but slower than the Gluon pass (12.4 against 11.1 ms
at B = 1, L = 8192 on an H200; docs/bench/cuda-local-2026-11-29), so only ``bwd_config`` ``LOCAL`` "cuda" (or
``PALIMPSA_CHUNKED_LOCAL=cuda``) runs it.
"""

import functools
import os

import torch

from . import cuda_build
from .cuda_build import nvrtc

CHANNELS_ENV = "PALIMPSA_CUDA_LOCAL_CHANNELS"  # channels a lane (8 by default, or 4)
STATES = 128
CHANNELS = 64  # a CTA's channels
SEG = 16  # tokens between slab states
SUB = 4  # tokens a sub-block (its start in shared memory)
SLOTS = 3  # shared-memory state slots: the starts of a segment's sub-blocks 1-3
LANE_CHANNELS = 8  # channels a lane: 8 (8 warps of up to 255 registers) or 4 (16 warps of up to 128)
KERNEL = "palimpsa_bwd_local_cuda"

SOURCE = r"""
#define N 128
#define CW 64
#ifndef CH
#define CH 8                    // channels a lane (8: 8 warps of 255 registers; 4: 16 warps of 128)
#endif
#define LG (CW / CH)            // lanes along the channels
#define SQ (32 / LG)            // state quads a warp
#define WARPS (N / (4 * SQ))
#define THREADS (WARPS * 32)
#ifndef PROBE
#define PROBE 0                 // timing only (wrong gradients): 1 no per-token barrier and warp sums of dv, dbeta;
#endif                          // 2 no dq, dk, decay-gradient butterflies; 4 walks of one token; 8 no pass A
#define SEG 16
#define SUB 4
#define SLOTS 3
#define TAU 20.0f
#define LOG2E 1.4426950408889634f

typedef unsigned short vt;

struct Stage {          // one segment's inputs
    vt k[SEG][N];
    vt q[SEG][N];
    vt v[SEG][CW];
    vt b[SEG][CW];
    vt dy[SEG][CW];
    float g[SEG];
};

struct Shared {
    float4 slot[SLOTS][2 * CH][THREADS];  // sub-block starts: a thread's CH channels x 4 states of M', then of J'
    Stage st;
    float red[2][WARPS][2 * CW];          // a token's dv, dbeta partial sums of each warp (two tokens in turn)
    float dgr[2][WARPS];                  // its decay-gradient partial sums
};

__device__ __forceinline__ float rcp(float x) {
    float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;
}
__device__ __forceinline__ float ex2(float x) {
    float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;
}
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp4(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group 0;\n" ::); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
__device__ __forceinline__ void red_add(float* p, float x) {
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(x) : "memory");
}

// two 16-bit values of a 32-bit word as float32
__device__ __forceinline__ void unpack(unsigned w, float& a, float& b) {
#if VT_BF16
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
#else
    unsigned short lo = w & 0xffff, hi = w >> 16;
    asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"(lo));
    asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"(hi));
#endif
}
__device__ __forceinline__ vt to_vt(float x) {
    unsigned short r;
#if VT_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
#endif
    return r;
}
// 4 consecutive 16-bit values (8 bytes) as float32
__device__ __forceinline__ void four(const vt* p, float* f) {
    const uint2 w = *(const uint2*)p;
    unpack(w.x, f[0], f[1]); unpack(w.y, f[2], f[3]);
}
// 8 consecutive 16-bit values (16 bytes) as float32
__device__ __forceinline__ void eight(const vt* p, float* f) {
    const uint4 w = *(const uint4*)p;
    unpack(w.x, f[0], f[1]); unpack(w.y, f[2], f[3]); unpack(w.z, f[4], f[5]); unpack(w.w, f[6], f[7]);
}

__device__ __forceinline__ void chans(const vt* p, float* f) {  // a lane's CH channels
#if CH == 8
    eight(p, f);
#else
    four(p, f);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
palimpsa_bwd_local_cuda(const vt* __restrict__ v, const vt* __restrict__ k, const vt* __restrict__ q,
                        const float* __restrict__ g, const vt* __restrict__ beta, const float* __restrict__ ip_ptr,
                        const float* __restrict__ ck_m, const float* __restrict__ ck_i, const vt* __restrict__ dy,
                        float4* __restrict__ slab, float* __restrict__ lm, float* __restrict__ li,
                        vt* __restrict__ dv, float* __restrict__ dk, float* __restrict__ dq, float* __restrict__ dg,
                        vt* __restrict__ dbeta, float* __restrict__ dm0, float* __restrict__ di0,
                        const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets,
                        int T, int n_chunks, int max_chunks, int n_work)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    Stage& st = sh.st;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31;
    const int cg = ln % LG, sq4 = ln / LG;          // channel group (CH channels), state quad (4 states)
    const int c0 = CH * cg;                         // the lane's first channel in the CTA's block
    const int n0 = 4 * SQ * w + 4 * sq4;            // the lane's first state
    const float ip = *ip_ptr;
    constexpr int PB = P / CW;                      // channel blocks a head
    constexpr int NSLAB = CT / SEG - 1;             // slab states a CTA: every segment's start but the first
    float4* my_slab = slab + (size_t)blockIdx.x * NSLAB * 2 * CH * THREADS + tid;

    float M[CH][4], J[CH][4], dM[CH][4], dI[CH][4];

    for (int work = blockIdx.x; work < n_work; work += gridDim.x) {
        const int hb = work % (H * PB), rest = work / (H * PB);
        const int c = rest % max_chunks, sq = rest / max_chunks;
        const int h = hb / PB, cb = hb % PB, ig = h / (H / G);
#if VARLEN
        const long long bos = cu_seqlens[sq];
        const int len = cu_seqlens[sq + 1] - cu_seqlens[sq];
        const long long boc = chunk_offsets[sq];
#else
        const long long bos = (long long)sq * T;
        const int len = T;
        const long long boc = (long long)sq * n_chunks;
#endif
        const int t0 = c * CT;
        const int n_tok = min(CT, len - t0);
        if (n_tok <= 0) continue;  // a chunk past its sequence's end (packed sequences of unequal lengths)
        const int n_seg = (n_tok + SEG - 1) / SEG;
        const int pc = cb * CW + c0;  // the lane's first channel in the head
        const size_t ck = ((size_t)(boc + c) * H + h) * P * N + (size_t)pc * N + n0;

        // a segment's inputs into the stage (tokens past the chunk zero-filled, read from its first token)
        auto stage = [&](int s) {
            const int tb = t0 + s * SEG, end = t0 + n_tok;
            __syncthreads();  // every warp done with the stage's previous contents
            for (int x = tid; x < SEG * (N / 8); x += THREADS) {  // 16 bytes: 8 states
                const int t = x / (N / 8), col = (x % (N / 8)) * 8;
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * G + ig) * N + col;
                cp16(&st.k[t][col], k + row, ok);
                cp16(&st.q[t][col], q + row, ok);
            }
            if (tid < SEG * (CW / 8)) {
                const int t = tid / (CW / 8), col = (tid % (CW / 8)) * 8;
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * H + h) * P + cb * CW + col;
                cp16(&st.v[t][col], v + row, ok);
                cp16(&st.b[t][col], beta + row, ok);
                cp16(&st.dy[t][col], dy + row, ok);
            } else if (tid >= THREADS - SEG) {
                const int t = tid - (THREADS - SEG);
                const bool ok = tb + t < end;
                cp4(&st.g[t], g + (size_t)(bos + (ok ? tb + t : t0)) * H + h, ok);
            }
            commit();
            wait_copies();
            __syncthreads();
        };
        // the next segment's inputs asked for in L2 (a line of 128 bytes a thread at most)
        auto ask = [&](int s) {
            const int tb = t0 + s * SEG;
            if (s < 0 || s >= n_seg) return;
            const int t = tid >> 4, part = tid & 15;
            if (t >= SEG || tb + t >= t0 + n_tok) return;
            const size_t tok = (size_t)(bos + tb + t);
            if (part < 2) prefetch_l2(k + (tok * G + ig) * N + part * 64);
            else if (part < 4) prefetch_l2(q + (tok * G + ig) * N + (part - 2) * 64);
            else if (part == 4) prefetch_l2(v + (tok * H + h) * P + cb * CW);
            else if (part == 5) prefetch_l2(beta + (tok * H + h) * P + cb * CW);
            else if (part == 6) prefetch_l2(dy + (tok * H + h) * P + cb * CW);
            else if (part == 7) prefetch_l2(g + tok * H + h);
        };

        // one token's update of the walked states: rescaled where the walk's log decay stays above -TAU, else
        // renormalised first and applied plainly (la: the log decay since the walk's start or renormalisation)
        auto update = [&](int t, float& la) {
            const float gt = st.g[t];
            float kf[4], vv[CH], bb[CH];
            four(&st.k[t][n0], kf);
            chans(&st.v[t][c0], vv);
            chans(&st.b[t][c0], bb);
            if (la + gt >= -TAU) {
                la += gt;
                const float inv = ex2(-la * LOG2E);
                float ks[4], kks[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) { ks[u] = kf[u] * inv; kks[u] = kf[u] * ks[u]; }
#pragma unroll
                for (int ch = 0; ch < CH; ++ch)
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        M[ch][u] = fmaf(vv[ch], ks[u], M[ch][u]);
                        J[ch][u] = fmaf(bb[ch], kks[u], J[ch][u]);
                    }
            } else {
                const float r = ex2(la * LOG2E), a = ex2(gt * LOG2E);
                const float ra = r * a;
#pragma unroll
                for (int ch = 0; ch < CH; ++ch)
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        M[ch][u] = fmaf(vv[ch], kf[u], M[ch][u] * ra);
                        J[ch][u] = fmaf(bb[ch] * kf[u], kf[u], J[ch][u] * ra);
                    }
                la = 0.f;
            }
        };
        auto to_true = [&](float& la) {  // rescaled -> true states
            if (la != 0.f) {
                const float r = ex2(la * LOG2E);
#pragma unroll
                for (int ch = 0; ch < CH; ++ch)
#pragma unroll
                    for (int u = 0; u < 4; ++u) { M[ch][u] *= r; J[ch][u] *= r; }
                la = 0.f;
            }
        };
        auto load_global = [&](const float* m, const float* i, size_t at) {  // [P, N] rows from at, J = I - I_prior
#pragma unroll
            for (int ch = 0; ch < CH; ++ch) {
                const float4 a = *(const float4*)(m + at + (size_t)ch * N);
                const float4 b = *(const float4*)(i + at + (size_t)ch * N);
                M[ch][0] = a.x; M[ch][1] = a.y; M[ch][2] = a.z; M[ch][3] = a.w;
                J[ch][0] = b.x - ip; J[ch][1] = b.y - ip; J[ch][2] = b.z - ip; J[ch][3] = b.w - ip;
            }
        };
        auto save_slab = [&](int s) {  // the true state at segment s's start (s >= 1)
            float4* p = my_slab + (size_t)(s - 1) * 2 * CH * THREADS;
#pragma unroll
            for (int ch = 0; ch < CH; ++ch) {
                p[ch * THREADS] = make_float4(M[ch][0], M[ch][1], M[ch][2], M[ch][3]);
                p[(CH + ch) * THREADS] = make_float4(J[ch][0], J[ch][1], J[ch][2], J[ch][3]);
            }
        };
        auto load_slab = [&](int s) {
            const float4* p = my_slab + (size_t)(s - 1) * 2 * CH * THREADS;
#pragma unroll
            for (int ch = 0; ch < CH; ++ch) {
                const float4 a = p[ch * THREADS], b = p[(CH + ch) * THREADS];
                M[ch][0] = a.x; M[ch][1] = a.y; M[ch][2] = a.z; M[ch][3] = a.w;
                J[ch][0] = b.x; J[ch][1] = b.y; J[ch][2] = b.z; J[ch][3] = b.w;
            }
        };
        auto save_slot = [&](int j) {
#pragma unroll
            for (int ch = 0; ch < CH; ++ch) {
                sh.slot[j][ch][tid] = make_float4(M[ch][0], M[ch][1], M[ch][2], M[ch][3]);
                sh.slot[j][CH + ch][tid] = make_float4(J[ch][0], J[ch][1], J[ch][2], J[ch][3]);
            }
        };
        auto load_slot = [&](int j) {
#pragma unroll
            for (int ch = 0; ch < CH; ++ch) {
                const float4 a = sh.slot[j][ch][tid], b = sh.slot[j][CH + ch][tid];
                M[ch][0] = a.x; M[ch][1] = a.y; M[ch][2] = a.z; M[ch][3] = a.w;
                J[ch][0] = b.x; J[ch][1] = b.y; J[ch][2] = b.z; J[ch][3] = b.w;
            }
        };

        // pass A: the chunk walked from its checkpoint, every segment's start but the first kept in the slab
        load_global(ck_m, ck_i, ck);
        for (int s = 0; s + 1 < n_seg && !(PROBE & 8); ++s) {
            ask(s + 1);
            stage(s);
            float la = 0.f;
            for (int t = 0; t < SEG; ++t) update(t, la);
            to_true(la);
            save_slab(s + 1);
        }

        // pass B
#pragma unroll
        for (int ch = 0; ch < CH; ++ch)
#pragma unroll
            for (int u = 0; u < 4; ++u) { dM[ch][u] = 0.f; dI[ch][u] = 0.f; }
        float an = 0.f;  // the decay of the token after the one reversed (the adjoint's factor)
        int par = 0;
        for (int s = n_seg - 1; s >= 0; --s) {
            ask(s - 1);
            stage(s);
            const int n_s = min(SEG, n_tok - s * SEG), nb = (n_s + SUB - 1) / SUB;
            const long long tseg = bos + t0 + s * SEG;  // the segment's first token
            if (s == 0) load_global(ck_m, ck_i, ck); else load_slab(s);
            if (nb == 1) {
                save_slot(0);
            } else {  // the starts of sub-blocks 1 .. nb - 1 into slots 0 .. nb - 2
                float la = 0.f;
                for (int t = 0; t < SUB * (nb - 1); ++t) {
                    update(t, la);
                    if ((t + 1) % SUB == 0) { to_true(la); save_slot((t + 1) / SUB - 1); }
                }
            }
            for (int j = nb - 1; j >= 0; --j) {
                const int slot = j > 0 ? j - 1 : (nb > 1 ? nb - 2 : 0);
                if (j == 0 && nb > 1) {  // the segment's start into the slot sub-block 1 no longer needs
                    if (s == 0) load_global(ck_m, ck_i, ck); else load_slab(s);
                    save_slot(slot);
                }
                const int m = min(SUB, n_s - SUB * j);
                for (int r = m; r >= 1; --r) {
                    // the state after token tt, walked from the sub-block's start
                    const int tt = SUB * j + r - 1;
                    load_slot(slot);
                    float la = 0.f;
                    for (int t = (PROBE & 4) ? tt : SUB * j; t <= tt; ++t) update(t, la);
                    const float inv = ex2(-la * LOG2E), A = ex2(la * LOG2E), ipi = ip * inv;
                    // the reverse step of token tt
                    float kf[4], qf[4], kk2[4], vv[CH], bb[CH], gg[CH];
                    four(&st.k[tt][n0], kf);
                    four(&st.q[tt][n0], qf);
                    chans(&st.v[tt][c0], vv);
                    chans(&st.b[tt][c0], bb);
                    chans(&st.dy[tt][c0], gg);
                    float dqa[4] = {0.f, 0.f, 0.f, 0.f}, dka[4] = {0.f, 0.f, 0.f, 0.f};
                    float dkb[4] = {0.f, 0.f, 0.f, 0.f};
                    float pv[CH], pb[CH], ss = 0.f;
#pragma unroll
                    for (int ch = 0; ch < CH; ++ch) {
                        const float gc = gg[ch] * inv;
                        float sv = 0.f, sb = 0.f;
#pragma unroll
                        for (int u = 0; u < 4; ++u) {
                            const float rr = rcp(J[ch][u] + ipi);
                            const float mu = M[ch][u] * rr;
                            const float tq = gc * qf[u] * rr;
                            dM[ch][u] = fmaf(an, dM[ch][u], tq);
                            dI[ch][u] = fmaf(an, dI[ch][u], -tq * mu);
                            dqa[u] = fmaf(mu, gg[ch], dqa[u]);
                            dka[u] = fmaf(dM[ch][u], vv[ch], dka[u]);
                            dkb[u] = fmaf(dI[ch][u], bb[ch], dkb[u]);
                            sv = fmaf(dM[ch][u], kf[u], sv);
                            sb = fmaf(dI[ch][u], kf[u] * kf[u], sb);
                            ss = fmaf(dM[ch][u], M[ch][u], ss);
                            ss = fmaf(dI[ch][u], J[ch][u], ss);
                        }
                        pv[ch] = sv; pb[ch] = sb;
                    }
                    // decay gradient: a_t <dM, M_{t-1}> + a_t <dI, J_{t-1}> = <dM, M_t> - v . dv + <dI, J_t> - b . db
                    float dgl = ss * A;
#pragma unroll
                    for (int ch = 0; ch < CH; ++ch) dgl -= vv[ch] * pv[ch] + bb[ch] * pb[ch];
                    // dq, dk: 8 sums over the warp's 8 channel groups (lane bits 0-2), reduce-scattered
#if !(PROBE & 2)
                    float x[4];
                    const bool b2 = (ln >> 2) & 1, b1 = (ln >> 1) & 1, b0 = ln & 1;
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        kk2[u] = fmaf(2.f * kf[u], dkb[u], dka[u]);  // dk's partial
                        const float keep = b2 ? kk2[u] : dqa[u], send = b2 ? dqa[u] : kk2[u];
                        x[u] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
                    }
                    float y0 = b1 ? x[2] : x[0], y1 = b1 ? x[3] : x[1];
                    y0 += __shfl_xor_sync(0xffffffffu, b1 ? x[0] : x[2], 2);
                    y1 += __shfl_xor_sync(0xffffffffu, b1 ? x[1] : x[3], 2);
                    float z = b0 ? y1 : y0;
                    z += __shfl_xor_sync(0xffffffffu, b0 ? y0 : y1, 1);
#if LG == 16
                    z += __shfl_xor_sync(0xffffffffu, z, 8);
#endif
                    const long long tok = tseg + tt;
                    if (LG == 8 || !((ln >> 3) & 1))
                        red_add((b2 ? dk : dq) + ((size_t)tok * G + ig) * N + n0 + 2 * b1 + b0, z);
#else
                    const long long tok = tseg + tt;
                    if (ss == 12345.f) red_add(dq + tok, dqa[0] + dqa[1] + dqa[2] + dqa[3] + dka[0] + dkb[0] + dgl);
#endif
                    // dv, dbeta: 2 CH sums over the SQ state quads (the lane bits above the channel groups'),
                    // reduce-scattered, then the warps
#if CH == 8
                    const bool h4 = (ln >> 4) & 1, h3 = (ln >> 3) & 1;
                    float e[8];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float kv = h4 ? pv[4 + i] : pv[i], sv = h4 ? pv[i] : pv[4 + i];
                        const float kb = h4 ? pb[4 + i] : pb[i], sb = h4 ? pb[i] : pb[4 + i];
                        e[i] = kv + __shfl_xor_sync(0xffffffffu, sv, 16);
                        e[4 + i] = kb + __shfl_xor_sync(0xffffffffu, sb, 16);
                    }
                    float f0 = h3 ? e[2] : e[0], f1 = h3 ? e[3] : e[1], f2 = h3 ? e[6] : e[4], f3 = h3 ? e[7] : e[5];
                    f0 += __shfl_xor_sync(0xffffffffu, h3 ? e[0] : e[2], 8);
                    f1 += __shfl_xor_sync(0xffffffffu, h3 ? e[1] : e[3], 8);
                    f2 += __shfl_xor_sync(0xffffffffu, h3 ? e[4] : e[6], 8);
                    f3 += __shfl_xor_sync(0xffffffffu, h3 ? e[5] : e[7], 8);
                    const int cc = c0 + 4 * h4 + 2 * h3;
#else
                    const bool h4 = (ln >> 4) & 1;
                    float f0 = h4 ? pv[2] : pv[0], f1 = h4 ? pv[3] : pv[1], f2 = h4 ? pb[2] : pb[0];
                    float f3 = h4 ? pb[3] : pb[1];
                    f0 += __shfl_xor_sync(0xffffffffu, h4 ? pv[0] : pv[2], 16);
                    f1 += __shfl_xor_sync(0xffffffffu, h4 ? pv[1] : pv[3], 16);
                    f2 += __shfl_xor_sync(0xffffffffu, h4 ? pb[0] : pb[2], 16);
                    f3 += __shfl_xor_sync(0xffffffffu, h4 ? pb[1] : pb[3], 16);
                    const int cc = c0 + 2 * h4;
#endif
                    *(float2*)&sh.red[par][w][cc] = make_float2(f0, f1);
                    *(float2*)&sh.red[par][w][CW + cc] = make_float2(f2, f3);
#if !(PROBE & 2)
#pragma unroll
                    for (int o = 16; o >= 1; o >>= 1) dgl += __shfl_xor_sync(0xffffffffu, dgl, o);
#endif
                    if (ln == 0) sh.dgr[par][w] = dgl;
#if !(PROBE & 1)
                    __syncthreads();
                    if (tid < 2 * CW) {
                        float sum = 0.f;
#pragma unroll
                        for (int ww = 0; ww < WARPS; ++ww) sum += sh.red[par][ww][tid];
                        const size_t at = ((size_t)tok * H + h) * P + cb * CW + (tid % CW);
                        if (tid < CW) dv[at] = to_vt(sum); else dbeta[at] = to_vt(sum);
                    } else if (tid == 2 * CW) {
                        float sum = 0.f;
#pragma unroll
                        for (int ww = 0; ww < WARPS; ++ww) sum += sh.dgr[par][ww];
                        red_add(dg + (size_t)tok * H + h, sum);
                    }
#endif
                    par ^= 1;
                    an = ex2(st.g[tt] * LOG2E);
                }
            }
        }
        // the chunk's local adjoint of the state before its first token: a_first dM, a_first dI
        float* om = nullptr;
        float* oi = nullptr;
        size_t at = 0;
        if (c > 0) {
            const long long slot0 = boc - sq > 0 ? boc - sq : 0;
            at = ((size_t)(slot0 + c - 1) * H + h) * P * N + (size_t)pc * N + n0;
            om = lm; oi = li;
        } else {
            at = ((size_t)sq * H + h) * P * N + (size_t)pc * N + n0;
            om = dm0; oi = di0;
        }
#pragma unroll
        for (int ch = 0; ch < CH; ++ch) {
            if (om) *(float4*)(om + at + (size_t)ch * N) = make_float4(an * dM[ch][0], an * dM[ch][1],
                                                                       an * dM[ch][2], an * dM[ch][3]);
            if (oi) *(float4*)(oi + at + (size_t)ch * N) = make_float4(an * dI[ch][0], an * dI[ch][1],
                                                                       an * dI[ch][2], an * dI[ch][3]);
        }
    }
}
"""


def warps(lane_channels: int = LANE_CHANNELS) -> int:
    """A CTA's warps: a warp holds all 64 channels of ``4 * 32 / (64 / lane_channels)`` states."""
    return STATES // (4 * (32 // (CHANNELS // lane_channels)))


def shared_bytes(lane_channels: int = LANE_CHANNELS) -> int:
    """The dynamic shared memory of a CTA: three state slots (64 KB each), one segment's 16-bit inputs, and the
    per-token reduction buffers."""
    slots = SLOTS * STATES * CHANNELS * 2 * 4
    stage = SEG * (2 * STATES + 3 * CHANNELS) * 2 + SEG * 4
    n = warps(lane_channels)
    return slots + stage + 2 * n * 2 * CHANNELS * 4 + 2 * n * 4


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  arch: str = "sm_90a", lane_channels: int = LANE_CHANNELS, probe: int = 0) -> bytes:
    """The local pass compiled for ``arch`` (a CPU is enough): the cubin's bytes."""
    flag = "VT_BF16" if dtype == torch.bfloat16 else "VT_F16"
    options = [f"--gpu-architecture={arch}", "-std=c++17", f"-D{flag}=1", f"-DH={heads}", f"-DG={groups}",
               f"-DP={head_dim}", f"-DCT={chunk}", f"-DVARLEN={int(varlen)}", f"-DCH={lane_channels}",
               f"-DPROBE={probe}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_bwd_local.cu", options, "the local pass")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, varlen: bool,
            lane_channels: int, probe: int = 0):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, arch=cuda_build.arch(device),
                          lane_channels=lane_channels, probe=probe)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes(lane_channels))


def slab_states(chunk: int) -> int:
    """The states of a CTA's slab: every segment's start but the chunk's first."""
    return max(1, chunk // SEG - 1)


def unsupported(v, k, q, beta, log_decay, dy, du, chunk_size: int) -> str | None:
    """Why the CUDA local pass cannot take these inputs (None where it can)."""
    if not v.is_cuda:
        return "not a CUDA tensor"
    if v.dtype not in (torch.bfloat16, torch.float16):
        return f"{v.dtype} inputs (bf16 or fp16)"
    if beta is None or any(t.dtype != v.dtype for t in (k, q, beta, dy)):
        return "beta absent, or keys, queries, gains or output gradients in another dtype than v"
    if du is not None:
        return "the uncertainty gradient"
    if k.shape[-1] != STATES:
        return f"{k.shape[-1]} states (the kernel is written for {STATES})"
    if v.shape[-1] % CHANNELS:
        return f"head dimension {v.shape[-1]} (a multiple of {CHANNELS})"
    if chunk_size % SEG:
        return f"chunk size {chunk_size} (a multiple of {SEG})"
    if torch.cuda.get_device_capability(v.device)[0] != 9:
        return "compute capability other than 9.x"
    if nvrtc() is None:
        return "no libnvrtc"
    return None


def _aligned(t: torch.Tensor) -> torch.Tensor:
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def programs(device: torch.device, n_work: int) -> int:
    """The persistent CTAs: one an SM, no more than the work items."""
    return max(1, min(n_work, torch.cuda.get_device_properties(device).multi_processor_count))


def launch(v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets,
           n_states, max_chunks, chunk_size, lane_channels: int | None = None, probe: int = 0):
    """The local pass into the chunked backward's buffers (``dv``, ``dbeta`` written; ``dk``, ``dq``, ``dg`` added
    to; ``lm``, ``li``, ``dm0``, ``di0`` as the Triton pass writes them); ``lane_channels``: 8 or 4 (None:
    ``PALIMPSA_CUDA_LOCAL_CHANNELS``, else ``LANE_CHANNELS``)."""
    batch, length, heads, head_dim = v.shape
    groups = k.shape[2]
    varlen = cu_seqlens is not None
    device = v.device.index if v.device.index is not None else torch.cuda.current_device()
    lane_channels = int(lane_channels or os.environ.get(CHANNELS_ENV, LANE_CHANNELS))
    if lane_channels not in (4, 8):
        raise ValueError(f"the CUDA local pass takes 4 or 8 channels a lane, not {lane_channels}")
    func = _kernel(device, v.dtype, heads, groups, head_dim, chunk_size, varlen, lane_channels, probe)
    n_work = n_states * max_chunks * heads * (head_dim // CHANNELS)
    if n_work == 0:
        return
    grid = programs(v.device, n_work)
    v, k, q, beta, dy = (_aligned(t) for t in (v, k, q, beta, dy))
    log_decay = log_decay.float().contiguous()
    slab = torch.empty((grid * slab_states(chunk_size) * 2 * CHANNELS * STATES,), dtype=torch.float32,
                       device=v.device)
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, slab, lm, li, dv, dk, dq, dg, dbeta, dm0, di0,
               cu_seqlens.to(torch.int32) if varlen else empty, offsets.to(torch.int32) if varlen else empty]
    n_chunks = 0 if varlen else max_chunks
    cuda_build.launch(func, v.device, (grid, 1, 1), 32 * warps(lane_channels), shared_bytes(lane_channels), tensors,
                      [length, n_chunks, max_chunks, n_work])
