"""The chunk-parallel backward's local pass in CUDA C++, compiled at run time by NVRTC (docs/kernels.md, "The local
pass in CUDA C++").

``chunked_bwd.py``'s first launch walks every chunk backwards from a zero adjoint at its end and writes the tokens'
local ``dv``, ``dbeta``, adds their ``dk``, ``dq``, ``dlog_decay``, and stores the chunk's local adjoint at its start
for the carry. The Triton and Gluon passes give a one-warp program 4 channels of a head. This kernel does the same
pass with the mapping chosen by hand:

* a CTA takes one (sequence, head, chunk, block of 64 channels) at a time (persistent CTAs, one an SM), 8 warps;
  warp ``w`` holds channels ``8 w .. 8 w + 7`` of the block and all 128 states, a lane 2 channels x 16 states
  (states ``32 j + 4 (lane % 8) + u``, as the CUDA chunk walk's), so ``dv``, ``dbeta`` and the decay gradient are
  summed inside the warp and the token loop has no barrier; ``dq``, ``dk`` leave each warp reduce-scattered over
  its 4 channel pairs, by two-state vector atomics (``red.global.add.v2.f32``, 4 a lane and token);
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
* each segment's inputs copied to shared memory by ``cp.async`` at its start (the next segment's asked for in L2),
  then keys, values and gains widened to float32 and the keys squared there, so that the walks load them without
  unpacking.

A first form (git ac9a4b3: a warp all 64 channels of 16 states, ``dv`` and ``dbeta`` summed over the warps through
shared memory with a barrier a token, 16-bit staged inputs) took the same time, 12.41 ms.

Scope (:func:`unsupported` names what it refuses): compute capability 9.x, bf16 or fp16 inputs of one dtype, 128
states, ``P`` a multiple of 64, no uncertainty gradient. Correct, but slower than the Gluon pass (12.42 against 11.18
ms at B = 1, L = 8192 on an H200; docs/bench/cuda-local-2026-11-29), so only ``bwd_config`` ``LOCAL`` "cuda" (or
``PALIMPSA_CHUNKED_LOCAL=cuda``) runs it.
"""

import functools

import torch

from . import cuda_build
from . import fused_recurrent as fr
from .cuda_build import nvrtc

STATES = 128
CHANNELS = 64  # a CTA's channels
SEG = 16  # tokens between slab states
SUB = 4  # tokens a sub-block (its start in shared memory)
SLOTS = 3  # shared-memory state slots: the starts of a segment's sub-blocks 1-3
THREADS = 256  # 8 warps: a warp 8 channels of all 128 states, a lane 2 channels x 16 states
KERNEL = "palimpsa_bwd_local_cuda"

SOURCE = cuda_build.HELPERS + r"""
#define N 128
#define CW 64
#define WARPS 8
#define THREADS 256
#ifndef PROBE
#define PROBE 0                 // timing only (wrong gradients): 2 no dq, dk, decay-gradient butterflies or atomics;
#endif                          // 4 walks of one token; 8 no pass A
#ifndef VEC
#define VEC 1                   // dq, dk added two states at a time (red.global.add.v2.f32)
#endif
#define SEG 16
#define SUB 4
#define SLOTS 3
#define TAU 20.0f
#define LOG2E 1.4426950408889634f

typedef unsigned short vt;

struct Stage {          // one segment's inputs: keys, squared keys, values and gains widened to float32
    float kw[SEG][N];   // (the 16-bit keys land in kk's bytes, values and gains in the first halves of their own)
    float kk[SEG][N];
    float vw[SEG][CW];
    float bw[SEG][CW];
    vt q[SEG][N];
    vt dy[SEG][CW];
    float g[SEG];
};

struct Shared {
    float4 slot[SLOTS][16][THREADS];  // sub-block starts: a thread's (channel, 4 states) of M', then of J'
    Stage st;
};

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
__device__ __forceinline__ void red_add(float* p, float x) {
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(x) : "memory");
}
__device__ __forceinline__ void red_add2(float* p, float x, float y) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(x), "f"(y) : "memory");
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
    const int i = ln & 7;                     // the lane's states 32 j + 4 i + u
    const int c0 = 8 * w + 2 * (ln >> 3);     // its two channels c0, c0 + 1 of the CTA's block
    const float ip = *ip_ptr;
    constexpr int PB = P / CW;                // channel blocks a head
    constexpr int NSLAB = CT / SEG - 1;       // slab states a CTA: every segment's start but the first
    float4* my_slab = slab + (size_t)blockIdx.x * NSLAB * 16 * THREADS + tid;
    const bool h4 = (ln >> 4) & 1, h3 = (ln >> 3) & 1, e2 = (ln >> 2) & 1, e1 = (ln >> 1) & 1;

    float M[2][16], J[2][16], dM[2][16], dI[2][16];

    for (int work = blockIdx.x; work < n_work; work += gridDim.x) {
        const int hb = work % (H * PB), rest = work / (H * PB);
        const int c = rest % max_chunks, sq = rest / max_chunks;
        const int h = hb / PB, cb = hb % PB, ig = h / (H / G);
        const Bounds sb = bounds(sq, cu_seqlens, chunk_offsets, T, n_chunks);
        const long long bos = sb.bos, boc = sb.boc;
        const int len = sb.len;
        const int t0 = c * CT;
        const int n_tok = min(CT, len - t0);
        if (n_tok <= 0) continue;  // a chunk past its sequence's end (packed sequences of unequal lengths)
        const int n_seg = (n_tok + SEG - 1) / SEG;
        const int pc = cb * CW + c0;  // the lane's first channel in the head
        const size_t ck = ((size_t)(boc + c) * H + h) * P * N + (size_t)pc * N + 4 * i;

        // a segment's inputs into the stage (tokens past the chunk zero-filled, read from its first token), then
        // keys, values and gains widened to float32 and the keys squared
        auto stage = [&](int s) {
            const int tb = t0 + s * SEG, end = t0 + n_tok;
            vt* raw_k = reinterpret_cast<vt*>(&st.kk[0][0]);
            vt* raw_v = reinterpret_cast<vt*>(&st.vw[0][0]);
            vt* raw_b = reinterpret_cast<vt*>(&st.bw[0][0]);
            __syncthreads();  // every warp done with the stage's previous contents
            {
                const int t = tid / (N / 8), col = (tid % (N / 8)) * 8;  // SEG * N / 8 = THREADS copies of 16 bytes
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * G + ig) * N + col;
                cp16(raw_k + t * N + col, k + row, ok);
                cp16(&st.q[t][col], q + row, ok);
            }
            if (tid < SEG * (CW / 8)) {
                const int t = tid / (CW / 8), col = (tid % (CW / 8)) * 8;
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * H + h) * P + cb * CW + col;
                cp16(raw_v + t * CW + col, v + row, ok);
                cp16(raw_b + t * CW + col, beta + row, ok);
                cp16(&st.dy[t][col], dy + row, ok);
            } else if (tid >= THREADS - SEG) {
                const int t = tid - (THREADS - SEG);
                const bool ok = tb + t < end;
                cp4(&st.g[t], g + (size_t)(bos + (ok ? tb + t : t0)) * H + h, ok);
            }
            commit();
            wait_copies();
            __syncthreads();
            const uint4 rk = *reinterpret_cast<const uint4*>(raw_k + 8 * tid);      // 8 keys a thread
            const uint2 rv = *reinterpret_cast<const uint2*>(raw_v + 4 * tid);      // 4 values
            const uint2 rb = *reinterpret_cast<const uint2*>(raw_b + 4 * tid);      // 4 gains
            __syncthreads();
            float f[8];
            unpack(rk.x, f[0], f[1]); unpack(rk.y, f[2], f[3]); unpack(rk.z, f[4], f[5]); unpack(rk.w, f[6], f[7]);
            float* kw = &st.kw[0][0] + 8 * tid;
            float* kk = &st.kk[0][0] + 8 * tid;
            *reinterpret_cast<float4*>(kw) = make_float4(f[0], f[1], f[2], f[3]);
            *reinterpret_cast<float4*>(kw + 4) = make_float4(f[4], f[5], f[6], f[7]);
            *reinterpret_cast<float4*>(kk) = make_float4(f[0] * f[0], f[1] * f[1], f[2] * f[2], f[3] * f[3]);
            *reinterpret_cast<float4*>(kk + 4) = make_float4(f[4] * f[4], f[5] * f[5], f[6] * f[6], f[7] * f[7]);
            unpack(rv.x, f[0], f[1]); unpack(rv.y, f[2], f[3]);
            *reinterpret_cast<float4*>(&st.vw[0][0] + 4 * tid) = make_float4(f[0], f[1], f[2], f[3]);
            unpack(rb.x, f[0], f[1]); unpack(rb.y, f[2], f[3]);
            *reinterpret_cast<float4*>(&st.bw[0][0] + 4 * tid) = make_float4(f[0], f[1], f[2], f[3]);
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
            const float2 vv = *reinterpret_cast<const float2*>(&st.vw[t][c0]);
            const float2 bb = *reinterpret_cast<const float2*>(&st.bw[t][c0]);
            float v0 = vv.x, v1 = vv.y, b0 = bb.x, b1 = bb.y;
            if (la + gt >= -TAU) {
                la += gt;
                const float inv = ex2(-la * LOG2E);
                v0 *= inv; v1 *= inv; b0 *= inv; b1 *= inv;
            } else {
                const float keep = ex2((la + gt) * LOG2E);  // to true states, then this token's decay
#pragma unroll
                for (int n = 0; n < 16; ++n) { M[0][n] *= keep; M[1][n] *= keep; J[0][n] *= keep; J[1][n] *= keep; }
                la = 0.f;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float4 K = *reinterpret_cast<const float4*>(&st.kw[t][32 * j + 4 * i]);
                const float4 Q = *reinterpret_cast<const float4*>(&st.kk[t][32 * j + 4 * i]);
                const float kv[4] = {K.x, K.y, K.z, K.w}, kq[4] = {Q.x, Q.y, Q.z, Q.w};
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int n = 4 * j + u;
                    M[0][n] = fmaf(v0, kv[u], M[0][n]);
                    M[1][n] = fmaf(v1, kv[u], M[1][n]);
                    J[0][n] = fmaf(b0, kq[u], J[0][n]);
                    J[1][n] = fmaf(b1, kq[u], J[1][n]);
                }
            }
        };
        auto to_true = [&](float& la) {  // rescaled -> true states
            if (la != 0.f) {
                const float r = ex2(la * LOG2E);
#pragma unroll
                for (int n = 0; n < 16; ++n) { M[0][n] *= r; M[1][n] *= r; J[0][n] *= r; J[1][n] *= r; }
                la = 0.f;
            }
        };
        auto load_global = [&](const float* m, const float* ii, size_t at) {  // [P, N] rows, J = I - I_prior
#pragma unroll
            for (int cc = 0; cc < 2; ++cc)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float4 a = *(const float4*)(m + at + (size_t)cc * N + 32 * j);
                    const float4 b = *(const float4*)(ii + at + (size_t)cc * N + 32 * j);
                    M[cc][4 * j] = a.x; M[cc][4 * j + 1] = a.y; M[cc][4 * j + 2] = a.z; M[cc][4 * j + 3] = a.w;
                    J[cc][4 * j] = b.x - ip; J[cc][4 * j + 1] = b.y - ip; J[cc][4 * j + 2] = b.z - ip;
                    J[cc][4 * j + 3] = b.w - ip;
                }
        };
        auto put = [&](float4* p) {  // 16 float4 a thread, THREADS apart
#pragma unroll
            for (int cc = 0; cc < 2; ++cc)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n = 4 * j;
                    p[(4 * cc + j) * THREADS] = make_float4(M[cc][n], M[cc][n + 1], M[cc][n + 2], M[cc][n + 3]);
                    p[(8 + 4 * cc + j) * THREADS] = make_float4(J[cc][n], J[cc][n + 1], J[cc][n + 2], J[cc][n + 3]);
                }
        };
        auto get = [&](const float4* p) {
#pragma unroll
            for (int cc = 0; cc < 2; ++cc)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n = 4 * j;
                    const float4 a = p[(4 * cc + j) * THREADS], b = p[(8 + 4 * cc + j) * THREADS];
                    M[cc][n] = a.x; M[cc][n + 1] = a.y; M[cc][n + 2] = a.z; M[cc][n + 3] = a.w;
                    J[cc][n] = b.x; J[cc][n + 1] = b.y; J[cc][n + 2] = b.z; J[cc][n + 3] = b.w;
                }
        };
        auto slab_at = [&](int s) { return my_slab + (size_t)(s - 1) * 16 * THREADS; };
        auto slot_at = [&](int j) { return &sh.slot[j][0][tid]; };

        // pass A: the chunk walked from its checkpoint, every segment's start but the first kept in the slab
        load_global(ck_m, ck_i, ck);
        for (int s = 0; s + 1 < n_seg && !(PROBE & 8); ++s) {
            ask(s + 1);
            stage(s);
            float la = 0.f;
            for (int t = 0; t < SEG; ++t) update(t, la);
            to_true(la);
            put(slab_at(s + 1));
        }

        // pass B
#pragma unroll
        for (int n = 0; n < 16; ++n) { dM[0][n] = 0.f; dM[1][n] = 0.f; dI[0][n] = 0.f; dI[1][n] = 0.f; }
        float an = 0.f;  // the decay of the token after the one reversed (the adjoint's factor)
        for (int s = n_seg - 1; s >= 0; --s) {
            ask(s - 1);
            stage(s);
            const int n_s = min(SEG, n_tok - s * SEG), nb = (n_s + SUB - 1) / SUB;
            const long long tseg = bos + t0 + s * SEG;  // the segment's first token
            if (s == 0) load_global(ck_m, ck_i, ck); else get(slab_at(s));
            if (nb == 1) {
                put(slot_at(0));
            } else {  // the starts of sub-blocks 1 .. nb - 1 into slots 0 .. nb - 2
                float la = 0.f;
                for (int t = 0; t < SUB * (nb - 1); ++t) {
                    update(t, la);
                    if ((t + 1) % SUB == 0) { to_true(la); put(slot_at((t + 1) / SUB - 1)); }
                }
            }
            for (int j = nb - 1; j >= 0; --j) {
                const int slot = j > 0 ? j - 1 : (nb > 1 ? nb - 2 : 0);
                if (j == 0 && nb > 1) {  // the segment's start into the slot sub-block 1 no longer needs
                    if (s == 0) load_global(ck_m, ck_i, ck); else get(slab_at(s));
                    put(slot_at(slot));
                }
                const int m = min(SUB, n_s - SUB * j);
                for (int r = m; r >= 1; --r) {
                    // the state after token tt, walked from the sub-block's start
                    const int tt = SUB * j + r - 1;
                    get(slot_at(slot));
                    float la = 0.f;
                    for (int t = (PROBE & 4) ? tt : SUB * j; t <= tt; ++t) update(t, la);
                    const float inv = ex2(-la * LOG2E), A = ex2(la * LOG2E), ipi = ip * inv;
                    const long long tok = tseg + tt;
                    // the reverse step of token tt
                    const float2 vv = *reinterpret_cast<const float2*>(&st.vw[tt][c0]);
                    const float2 bb = *reinterpret_cast<const float2*>(&st.bw[tt][c0]);
                    float g0, g1;
                    unpack(*reinterpret_cast<const unsigned*>(&st.dy[tt][c0]), g0, g1);
                    const float vc[2] = {vv.x, vv.y}, bc[2] = {bb.x, bb.y}, gc[2] = {g0, g1};
                    const float gs[2] = {g0 * inv, g1 * inv};
                    float pv[2] = {0.f, 0.f}, pb[2] = {0.f, 0.f}, ss = 0.f;
                    float* row_q = dq + ((size_t)tok * G + ig) * N + 4 * i;
                    float* row_k = dk + ((size_t)tok * G + ig) * N + 4 * i;
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj) {
                        const float4 K = *reinterpret_cast<const float4*>(&st.kw[tt][32 * jj + 4 * i]);
                        const float4 KQ = *reinterpret_cast<const float4*>(&st.kk[tt][32 * jj + 4 * i]);
                        const uint2 qw = *reinterpret_cast<const uint2*>(&st.q[tt][32 * jj + 4 * i]);
                        float qf[4];
                        unpack(qw.x, qf[0], qf[1]); unpack(qw.y, qf[2], qf[3]);
                        const float kv[4] = {K.x, K.y, K.z, K.w}, kq[4] = {KQ.x, KQ.y, KQ.z, KQ.w};
                        float dqa[4], dka[4], dkb[4];
#pragma unroll
                        for (int u = 0; u < 4; ++u) {
                            const int n = 4 * jj + u;
                            dqa[u] = 0.f; dka[u] = 0.f; dkb[u] = 0.f;
#pragma unroll
                            for (int cc = 0; cc < 2; ++cc) {
                                const float rr = rcp(J[cc][n] + ipi);
                                const float mu = M[cc][n] * rr;
                                const float tq = gs[cc] * qf[u] * rr;
                                dM[cc][n] = fmaf(an, dM[cc][n], tq);
                                dI[cc][n] = fmaf(an, dI[cc][n], -tq * mu);
                                dqa[u] = fmaf(mu, gc[cc], dqa[u]);
                                dka[u] = fmaf(dM[cc][n], vc[cc], dka[u]);
                                dkb[u] = fmaf(dI[cc][n], bc[cc], dkb[u]);
                                pv[cc] = fmaf(dM[cc][n], kv[u], pv[cc]);
                                pb[cc] = fmaf(dI[cc][n], kq[u], pb[cc]);
                                ss = fmaf(dM[cc][n], M[cc][n], ss);
                                ss = fmaf(dI[cc][n], J[cc][n], ss);
                            }
                            dka[u] = fmaf(2.f * kv[u], dkb[u], dka[u]);  // dk's partial
                        }
#if !(PROBE & 2)
                        // dq, dk of the 4 states over the 4 channel pairs (lane bits 3, 4): reduce-scattered to 2
                        // consecutive states of one of them a lane
                        float x[4];
#pragma unroll
                        for (int u = 0; u < 4; ++u)
                            x[u] = (h4 ? dka[u] : dqa[u]) + __shfl_xor_sync(0xffffffffu, h4 ? dqa[u] : dka[u], 16);
                        const float y0 = (h3 ? x[2] : x[0]) + __shfl_xor_sync(0xffffffffu, h3 ? x[0] : x[2], 8);
                        const float y1 = (h3 ? x[3] : x[1]) + __shfl_xor_sync(0xffffffffu, h3 ? x[1] : x[3], 8);
                        float* at = (h4 ? row_k : row_q) + 32 * jj + 2 * h3;
#if VEC
                        red_add2(at, y0, y1);
#else
                        red_add(at, y0); red_add(at + 1, y1);
#endif
#else
                        if (ss == 12345.f) red_add(row_q, dqa[0] + dqa[1] + dqa[2] + dqa[3] + dka[0] + dka[3]);
#endif
                    }
                    // decay gradient: a_t <dM, M_{t-1}> + a_t <dI, J_{t-1}> = <dM, M_t> - v . dv + <dI, J_t> - b . db
                    float dgl = ss * A - (vc[0] * pv[0] + vc[1] * pv[1] + bc[0] * pb[0] + bc[1] * pb[1]);
                    // dv, dbeta of the two channels over the 8 state lanes (bits 0-2): reduce-scattered
                    float z0 = (e2 ? pb[0] : pv[0]) + __shfl_xor_sync(0xffffffffu, e2 ? pv[0] : pb[0], 4);
                    float z1 = (e2 ? pb[1] : pv[1]) + __shfl_xor_sync(0xffffffffu, e2 ? pv[1] : pb[1], 4);
                    float z = (e1 ? z1 : z0) + __shfl_xor_sync(0xffffffffu, e1 ? z0 : z1, 2);
                    z += __shfl_xor_sync(0xffffffffu, z, 1);
                    if ((ln & 1) == 0) {
                        const size_t at = ((size_t)tok * H + h) * P + cb * CW + c0 + e1;
                        (e2 ? dbeta : dv)[at] = to_vt(z);
                    }
#if !(PROBE & 2)
#pragma unroll
                    for (int o = 16; o >= 1; o >>= 1) dgl += __shfl_xor_sync(0xffffffffu, dgl, o);
                    if (ln == 0) red_add(dg + (size_t)tok * H + h, dgl);
#endif
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
            at = ((size_t)(slot0 + c - 1) * H + h) * P * N + (size_t)pc * N + 4 * i;
            om = lm; oi = li;
        } else {
            at = ((size_t)sq * H + h) * P * N + (size_t)pc * N + 4 * i;
            om = dm0; oi = di0;
        }
#pragma unroll
        for (int cc = 0; cc < 2; ++cc)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int n = 4 * j;
                const size_t o = at + (size_t)cc * N + 32 * j;
                if (om) *(float4*)(om + o) = make_float4(an * dM[cc][n], an * dM[cc][n + 1], an * dM[cc][n + 2],
                                                         an * dM[cc][n + 3]);
                if (oi) *(float4*)(oi + o) = make_float4(an * dI[cc][n], an * dI[cc][n + 1], an * dI[cc][n + 2],
                                                         an * dI[cc][n + 3]);
            }
        __syncthreads();  // (the next work item's stage overwrites this one's)
    }
}
"""


def shared_bytes() -> int:
    """The dynamic shared memory of a CTA: three state slots (64 KB each) and one segment's inputs (keys, squared
    keys, values and gains in float32; queries and output gradients as they come, 16-bit; the log decays)."""
    slots = SLOTS * STATES * CHANNELS * 2 * 4
    stage = SEG * (2 * STATES + 2 * CHANNELS) * 4 + SEG * (STATES + CHANNELS) * 2 + SEG * 4
    return slots + stage


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  arch: str = "sm_90a", probe: int = 0, vector_atomics: bool = True) -> bytes:
    """The local pass compiled for ``arch`` (a CPU is enough): the cubin's bytes (``probe``: the timing bits of
    the source's ``PROBE``, which leave parts out; ``vector_atomics``: ``dq``, ``dk`` added two states at a
    time)."""
    flag = "VT_BF16" if dtype == torch.bfloat16 else "VT_F16"
    options = [f"--gpu-architecture={arch}", "-std=c++17", f"-D{flag}=1", f"-DH={heads}", f"-DG={groups}",
               f"-DP={head_dim}", f"-DCT={chunk}", f"-DVARLEN={int(varlen)}", f"-DPROBE={probe}",
               f"-DVEC={int(vector_atomics)}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_bwd_local.cu", options, "the local pass")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, varlen: bool,
            probe: int = 0, vector_atomics: bool = True):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, arch=cuda_build.arch(device),
                          probe=probe, vector_atomics=vector_atomics)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes())


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


def programs(device: torch.device, n_work: int) -> int:
    """The persistent CTAs: one an SM, no more than the work items."""
    return max(1, min(n_work, fr._sm_count(device)))


def launch(v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets,
           n_states, max_chunks, chunk_size, probe: int = 0, vector_atomics: bool = True):
    """The local pass into the chunked backward's buffers (``dv``, ``dbeta`` written; ``dk``, ``dq``, ``dg`` added
    to; ``lm``, ``li``, ``dm0``, ``di0`` as the Triton pass writes them); ``probe``, ``vector_atomics``: as
    :func:`compile_cubin`'s."""
    _, length, heads, head_dim = v.shape
    groups = k.shape[2]
    varlen = cu_seqlens is not None
    n_work = n_states * max_chunks * heads * (head_dim // CHANNELS)
    if n_work == 0:  # nothing to walk (an empty grid is a launch error)
        return
    device = v.device.index if v.device.index is not None else torch.cuda.current_device()
    func = _kernel(device, v.dtype, heads, groups, head_dim, chunk_size, varlen, probe, vector_atomics)
    grid = programs(v.device, n_work)
    v, k, q, beta, dy = (cuda_build.aligned(t) for t in (v, k, q, beta, dy))
    log_decay = log_decay.float().contiguous()
    slab = torch.empty((grid * slab_states(chunk_size) * 2 * CHANNELS * STATES,), dtype=torch.float32,
                       device=v.device)  # 64 KB a state: a thread's 16 float4, THREADS apart
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, slab, lm, li, dv, dk, dq, dg, dbeta, dm0, di0,
               cu_seqlens.to(torch.int32) if varlen else empty, offsets.to(torch.int32) if varlen else empty]
    n_chunks = 0 if varlen else max_chunks
    cuda_build.launch(func, v.device, (grid, 1, 1), THREADS, shared_bytes(), tensors,
                      [length, n_chunks, max_chunks, n_work])
