"""The chunk-parallel backward's local pass in CUDA C++, compiled at run time by NVRTC, its state updates on tensor
cores (docs/kernels.md, "The local pass in CUDA C++").

``chunked_bwd.py``'s first launch walks every chunk backwards from a zero adjoint at its end and writes the tokens'
local ``dv``, ``dbeta``, adds their ``dk``, ``dq``, ``dlog_decay``, and stores the chunk's local adjoint at its start
for the carry. This kernel does that pass with:

* persistent CTAs, one an SM, of 8 warps (255 registers, no spills); a CTA takes one (sequence, head, chunk, block of
  64 channels) at a time; warp ``w`` holds channels ``8 w .. 8 w + 7`` of the block and all 128 states;
* a lane's elements laid out as the accumulator of ``mma.m16n8k8`` with the states as rows and the warp's 8 channels
  as columns (lane ``(g, t)``: states ``16 m + g + 8 h``, channels ``2 t``, ``2 t + 1``), so that a state update over up
  to 8 tokens is one TF32 tensor-core product a 16-state tile and state (``M += K^T (w v)``, ``J += (K^2)^T (w beta)``:
  16 products a warp), keys and squared keys as the A operand, weighted values and gains as the B operand;
* the recompute: pass A walks the chunk a segment of 16 tokens at a time (a product a sub-block of 8 and tile: the
  state times the sub-block's decay, each token weighted by the decays after it) and keeps every segment's start in a
  global slab: put into a state slot (pass B's, free until then) and stored from there by one 64 KB bulk copy of the
  tensor memory accelerator at the next stage, so that the warps do not issue the stores (the timing macro ``BULKA``
  0: their own 16-byte stores, 1.2% slower, docs/bench/fwd-local-2026-11-29, calls 7 and 9); pass B reads the slab
  past L1, which the bulk copies do not update;
  pass B takes the segments from the last, keeps the segment's start and the state 8 tokens in in two 64 KB
  shared-memory slots, and gets every token's state from its sub-block's start in one product, rescaled
  (``M' = M / A``, ``A`` the decay since the sub-block's start; tokens weighted by ``1 / A`` at themselves, those after
  the token by 0) where the sub-block's log decay stays above -20, plainly elsewhere;
* peeled states: in a rescaled sub-block a token's state is the one after it less that token's term (``M' -= (v / A)
  k``, ``J' -= (beta / A) k^2``, 2 FFMAs an element, the operands rounded as the product read them, so the term leaves
  exactly as it came) wherever the log decay from the token to the last state from a product stays above ``-TSUB``
  (6: the peeled state's rounding errors grow by that decay, at most e^6); the other tokens' states come from a
  product as above. The reverse step has two copies, one that peels the next state. The stage computes each token's
  factors once for every warp (``1 / A``, ``A``, its decay and its flags: peeled, peels) and the token loop reads them
  a token ahead (the timing macro ``FAC`` 0: each token's own, as first built). With the bench's decays 87% of the
  tokens are peeled (docs/bench/peel-2026-11-29). The timing macro ``SLABCP`` 1 copies each segment's start from the
  slab into the slot the segment before no longer reads while that one finishes (slower: call 4 there);
* the reverse step on the rescaled states as they are: ``M / I = M' / (J' + I_prior / A)``, the output gradient times
  ``1 / A``; ``dv``, ``dbeta`` and the decay gradient summed inside the warp (the decay gradient from the token's own
  state, ``a_t <dM_t, M_{t-1}> = <dM_t, M_t> - v . dv``, likewise ``J``, its two sums in 4 chains of FFMAs: the
  timing macro ``SSPLIT`` 0 takes one), ``dq`` and ``dk`` reduce-scattered over the
  warp's 4 channel pairs and added by four-state vector atomics (``red.global.add.v4.f32``, 2 a lane and token) into
  a ``[tokens, groups, 256]`` scratch that :func:`states_of_sums` orders for ``launch`` to add;
* each segment's inputs copied to shared memory by ``cp.async`` while the segment before runs, each thread's copies
  in loops of known trip count, so at fixed offsets (the timing macro ``FIXCP`` 0: a general loop, 0.8% slower,
  docs/bench/fixcp-2026-11-29, call 1), then widened once:
  keys and squared keys as TF32 A fragments and as rows permuted to the lanes' states, queries permuted, values, gains
  and output gradients in float32, the log decays summed. Pass A's walk reads the fragments, values, gains and decays
  alone, so its stages build only those (the timing macro ``LEANA`` 0 builds everything there too, as first written;
  2.5% slower, docs/bench/w16-2026-11-29, call 3).

Precision: the products round their operands to TF32 (10 bits of mantissa; 16-bit keys are exact), as the chunked
backward's corrections and the chunked forward's local pass do for these inputs; the recomputed states carry that
rounding into the gradients (relative differences of 1e-4 to 8e-4 from the Gluon pass's;
docs/bench/cuda-mma-2026-11-29). Peeled states leave the float64 checks where they were
(``emulation.cuda_local_chunk``'s ``subtract``; ``test_emulation.py``).

Scope (:func:`unsupported` names what it refuses): compute capability 9.x, bf16, fp16 or float32 values, gains and
output gradients of one dtype, keys and queries of one dtype (float32 anywhere only where TF32 is allowed,
``torch.get_float32_matmul_precision() != "highest"``), 128 states, ``P`` a multiple of 64, no uncertainty gradient.
``chunked_bwd`` takes it under ``LOCAL`` "auto" where its work fills the GPU (``AUTO_CUDA_ROUNDS``) and the keys come
in the values' dtype; ``LOCAL`` "cuda" (or ``PALIMPSA_CHUNKED_LOCAL=cuda``) asks for it wherever it can run.

The timing macro ``W16`` runs 16 warps of 8 channels x 64 states (512 threads, 128 registers): each state half's
``dv``, ``dbeta`` sums meet in shared memory and a segment's are written at the next stage; the squared keys come from
the keys in the reverse step instead of staged rows. Correct on an H200 and 10-13% slower: the issue rate rose from 0.57
to 0.66 a cycle and scheduler, but the instructions by 31% (docs/kernels.md, "What bounds the pass now").

Earlier forms (git 55392c2 and before: a lane's 2 channels x 16 states updated by FFMAs, 4.25 updates a token from
sub-block starts every 4 tokens) took 12.42 ms against the Gluon pass's 11.18 at B = 1, L = 8192; the tensor-core form
with a product every token 9.5-10.3 ms, with peeled states 9.0-9.1 (``CUDA_TSUB`` 0 gives the former).
"""

import functools

import torch

from . import cuda_build
from . import fused_recurrent as fr
from .cuda_build import dtype_options, nvrtc

STATES = 128
CHANNELS = 64  # a CTA's channels
SEG = 16  # tokens between slab states (a stage)
SUB = 8  # tokens a sub-block: one tensor-core k-step; its start in shared memory
SLOTS = 2  # shared-memory state slots: a segment's start and the state after its 8th token
THREADS = 256  # 8 warps: a warp 8 channels of all 128 states, a lane 2 channels x 16 states (W16: 512, 8 states)
ROW = 20  # floats a lane group's permuted row takes (16 used; the padding keeps 8 groups' 16-byte reads apart)
TAU = 20.0  # a sub-block rescaled where its log decay stays above -TAU
TSUB = 6.0  # a token's state peeled from the one after it where the log decay since the last product stays above -TSUB
KERNEL = "palimpsa_bwd_local_cuda"

SOURCE = cuda_build.HELPERS + cuda_build.TENSOR_CORE_HELPERS + r"""
// N, CW, THREADS, SEG, SUB, ROW, TAU come from layout_options() (the module's constants)
#ifndef W16
#define W16 0                   // (timing) 1: 16 warps of 8 channels x 64 states (4 tiles), 128 registers a thread
#endif
#if W16 != (THREADS == 512)
#error "W16 takes 512 threads, else 256"
#endif
#define TL (W16 ? 4 : 8)        // state tiles a warp
#ifndef PROBE
#define PROBE 0                 // timing only (wrong gradients): 2 no dq, dk, decay-gradient butterflies or atomics;
#endif                          // 4 no per-token walks in pass B (the sub-block's start as it is); 8 no pass A;
                                // 16 the butterflies but no atomics; 32 the reverse step's reciprocals as multiplies;
                                // (BULKA 0) 64 pass A's slab states all into one slot (cached), 128 none stored
#ifndef SSPLIT
#define SSPLIT 1                // the decay gradient's <dM, M> + <dI, J>: 1 in 4 chains of FFMAs (by term and
#endif                          // channel), 0 (timing) in one chain of 64 (docs/bench/hsum-2026-11-29, call 5)
#ifndef PEEL
#define PEEL 1                  // in a rescaled sub-block, a token's state is the one after it less that token's term
#endif                          // where the log decay from it to the last state from a product stays above -TSUB
#ifndef TSUB                    // (PEEL 0: every token's state from a product)
#define TSUB 6.0f
#endif
#ifndef FAC
#define FAC 1                   // (timing) pass B's token factors: 1 the stage's, read a token ahead; 0 each token's
#endif
#ifndef LEANA
#define LEANA 1                 // pass A's segments staged with only what its walk reads (the keys' fragments,
#endif                          // values, gains, log decays): no rows, output gradients or pass B's factors
#ifndef BULKA
#define BULKA 1                 // pass A's slab states: 1 put into a state slot (free until pass B) and stored from
#endif                          // there by one bulk copy of the tensor memory accelerator, 0 by the threads' own stores
#if BULKA && (PROBE & 192)
#error "PROBE 64 and 128 time the threads' own slab stores: build them with BULKA=0"
#endif
#ifndef K2
#define K2 0                    // (timing) dk's 2 k (dI . b) as k (dI . 2 b): 2 multiplies a token and lane instead of
#endif                          // 16, the same bits (doubling is exact); no faster (docs/bench/k2-2026-11-29, call 1)
#ifndef SLABCP
#define SLABCP 0                // (timing) a segment's start: 1 copied into its slot during the segment after it; 0
#endif                          // read from the slab at its start (faster: docs/bench/peel-2026-11-29, call 4)
#define PEELS 1u                // a token's flags: its reverse step leaves the token before's state (peeled from its)
#define PEELED 2u               // its state peeled from the token after's
#define LOG2E 1.4426950408889634f

// vt: values, gains, output gradients (and dv, dbeta); kt: keys and queries (cuda_build.TENSOR_CORE_HELPERS)
// A lane (g = lane / 4, t = lane % 4) holds the states 16 m + g + 8 h (m = 0..7, h = 0, 1) of its warp's channels
// 2 t, 2 t + 1: the accumulator fragment of mma.m16n8k8 with the states as rows and the warp's 8 channels as columns,
// element [m][2 h + c]. So a state update over up to 8 tokens is 8 tensor-core products a state (M' += K^T (w v),
// J' += (K^2)^T (w beta)), the keys as the A operand, the weighted values and gains as the B operand.
struct Stage {                  // one segment's inputs
    float4 ak[2][8][32];        // keys as A fragments: [k-step][state tile][lane] (16-bit keys are tf32 exactly)
    float4 akk[2][8][32];       // squared keys, rounded to tf32
    float kr[SEG][8][ROW];      // keys, squared keys, queries of lane group g's 16 states (16 m + g + 8 h at 2 m + h)
#if !W16                        // (W16: the squared keys from the keys, in the reverse step)
    float kkr[SEG][8][ROW];
#endif
    float qr[SEG][8][ROW];
#if PEEL && !W16
    float kkt[SEG][8][ROW];     // the squared keys of kkr rounded to tf32, as the products read them (akk)
#endif
    float vw[SEG][CW];          // values, gains, output gradients in float32
    float bw[SEG][CW];
    float dyw[SEG][CW];
    float gs[SEG];              // the log decays summed from the segment's first token (inclusive)
    float gw[SEG];              // the log decays
    float4 fac[SEG];            // pass B's factors of a token (every warp's the same): 1 / A and A (A its sub-block's
                                // decay through it, 1 where not rescaled), its decay, and its flags (PEELS, PEELED)
#if W16                         // (W16) each state half's dv, dbeta sums of a token, [token][half][dv, dbeta][channel]
    float part[SEG][2][2][CW + 8];  // (rows 8 floats longer: dv's and dbeta's stores in other banks), added and
#endif                              // written at the next segment's stage
};
struct Raw {                    // a segment's inputs as copied (the next segment's copies run during this one)
    kt rk[SEG][N];
    kt rq[SEG][N];
    vt rv[SEG][CW];
    vt rb[SEG][CW];
    vt rdy[SEG][CW];
    float g[SEG];
};

struct Shared {
    float4 slot[2][2 * TL][THREADS];  // a segment's start, the state after its 8th token: a thread's M tiles, J's
    Stage st;
    Raw raw;
};

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
// (BULKA) a bulk copy from shared to global memory by the tensor memory accelerator, in a group of its own; the
// shared memory's writes before it made visible to it; waiting till at most one group still reads its source, or
// till every group's writes are done and visible to the CTA's loads after a barrier
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" :: "l"(dst), "r"(smem_addr(src)),
                 "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void fence_to_bulk() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_read_but_one() { asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_done() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ vt to_vt(float x) {
#if VT_F32
    return x;
#else
    unsigned short r;
#if VT_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
#endif
    return r;
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
palimpsa_bwd_local_cuda(const vt* __restrict__ v, const kt* __restrict__ k, const kt* __restrict__ q,
                        const float* __restrict__ g, const vt* __restrict__ beta, const float* __restrict__ ip_ptr,
                        const float* __restrict__ ck_m, const float* __restrict__ ck_i, const vt* __restrict__ dy,
                        float4* __restrict__ slab, float* __restrict__ lm, float* __restrict__ li,
                        vt* __restrict__ dv, float* __restrict__ dqk, float* __restrict__ dg,
                        vt* __restrict__ dbeta, float* __restrict__ dm0, float* __restrict__ di0,
                        const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets,
                        int T, int n_chunks, int max_chunks, int n_work)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    Stage& st = sh.st;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31;
    const int gq = ln >> 2, tq = ln & 3;      // the lane's row group (states 16 m + gq + 8 h) and channel pair
    const int cw = W16 ? (w & 7) : w;         // the warp's 8 channels (W16: of its state half's tiles)
    const int hs = W16 ? (w >> 3) : 0;       // (W16) the warp's state half
    const int c0 = 8 * cw + 2 * tq;           // its two channels c0, c0 + 1 of the CTA's block
    const int cb_lane = 8 * cw + gq;          // the channel of its B fragments
    const float ip = *ip_ptr;
    constexpr int PB = P / CW;                // channel blocks a head
    constexpr int NSLAB = CT / SEG;           // slab states a CTA: every segment's start (the checkpoint first)
    float4* my_slab = slab + (size_t)blockIdx.x * NSLAB * 2 * TL * THREADS + tid;
    const bool b4 = (ln >> 4) & 1, b3 = (ln >> 3) & 1, b2 = (ln >> 2) & 1, b1 = (ln >> 1) & 1, b0 = ln & 1;

    float M[TL][4], J[TL][4], dM[TL][4], dI[TL][4];

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
        const size_t ck = ((size_t)(boc + c) * H + h) * P * N + (size_t)pc * N + gq;

        // a segment's inputs asked for in L2: a token's lines of 128 bytes over 16 threads, one line a thread (key
        // and query rows 2 lines each in 16 bits, 4 in float32; value, gain, output-gradient rows 1 or 2; the decay)
        auto ask = [&](int s) {
            const int tb = t0 + s * SEG;
            if (s < 0 || s >= n_seg) return;
            const int t = tid >> 4, part = tid & 15;
            if (t >= SEG || tb + t >= t0 + n_tok) return;
            const size_t tok = (size_t)(bos + tb + t);
            constexpr int KL = N * (int)sizeof(kt) / 128, VL = CW * (int)sizeof(vt) / 128;
            const char* row_k = reinterpret_cast<const char*>(k + (tok * G + ig) * N);
            const char* row_q = reinterpret_cast<const char*>(q + (tok * G + ig) * N);
            const size_t vo = (tok * H + h) * P + cb * CW;
            if (part < KL) prefetch_l2(row_k + 128 * part);
            else if (part < 2 * KL) prefetch_l2(row_q + 128 * (part - KL));
            else if (part < 2 * KL + VL) prefetch_l2(reinterpret_cast<const char*>(v + vo) + 128 * (part - 2 * KL));
            else if (part < 2 * KL + 2 * VL)
                prefetch_l2(reinterpret_cast<const char*>(beta + vo) + 128 * (part - 2 * KL - VL));
            else if (part < 2 * KL + 3 * VL)
                prefetch_l2(reinterpret_cast<const char*>(dy + vo) + 128 * (part - 2 * KL - 2 * VL));
            else if (part == 2 * KL + 3 * VL) prefetch_l2(g + tok * H + h);
        };

        // the order of the segments staged: pass A's (the chunk's but the last, first to last), then pass B's (last
        // to first); each one's copies are asked for while the one before it runs
        const int n_a = (PROBE & 8) ? 0 : n_seg - 1, n_staged = n_a + n_seg;
        auto seg_of = [&](int i) { return i < n_a ? i : n_seg - 1 - (i - n_a); };
        // a segment's inputs copied into the raw buffer (tokens past the chunk zero-filled): one group of copies
        auto copy_in = [&](int s) {
            Raw& rw = sh.raw;
            const int tb = t0 + s * SEG, end = t0 + n_tok;
#pragma unroll
            PIECES(f, SEG * N / KPC) {  // 16-byte pieces of the key and query rows
                const int t = f / (N / KPC), col = (f % (N / KPC)) * KPC;
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * G + ig) * N + col;
                cp16(&rw.rk[t][col], k + row, ok);
                cp16(&rw.rq[t][col], q + row, ok);
            }
#pragma unroll
            PIECES(f, SEG * CW / VPC) {  // and of the value, gain, output gradient rows
                const int t = f / (CW / VPC), col = (f % (CW / VPC)) * VPC;
                const bool ok = tb + t < end;
                const size_t row = ((size_t)(bos + (ok ? tb + t : t0)) * H + h) * P + cb * CW + col;
                cp16(&rw.rv[t][col], v + row, ok);
                cp16(&rw.rb[t][col], beta + row, ok);
                cp16(&rw.rdy[t][col], dy + row, ok);
            }
            if (tid >= THREADS - SEG) {
                const int t = tid - (THREADS - SEG);
                const bool ok = tb + t < end;
                cp4(&rw.g[t], g + (size_t)(bos + (ok ? tb + t : t0)) * H + h, ok);
            }
            commit();
        };
#if W16
        // pass B's segment s: its tokens' dv, dbeta, the state halves' sums added (every warp's written)
        auto flush = [&](int s) {
            const int n_s = min(SEG, n_tok - s * SEG);
            const long long tb = bos + t0 + s * SEG;
            for (int x = tid; x < SEG * 2 * CW; x += THREADS) {
                const int which = x / (SEG * CW), t = (x / CW) % SEG, c = x % CW;
                if (t < n_s)
                    (which ? dbeta : dv)[((size_t)(tb + t) * H + h) * P + cb * CW + c]
                        = to_vt(st.part[t][0][which][c] + st.part[t][1][which][c]);
            }
        };
#endif
        // the i-th staged segment: its copies awaited and widened into the stage (the keys and squared keys as A
        // fragments and as rows permuted to the lanes' states, the queries permuted, the values, gains and output
        // gradients in float32, the log decays summed), then the next one's copies asked for (pass_b: a stage of pass
        // B, which under W16 also writes the segment before's dv, dbeta)
        auto stage = [&](int i, bool pass_b) {
            const Raw& rw = sh.raw;
            wait_copies();
            __syncthreads();  // this segment's copies landed, every warp done with the stage's previous contents
#if BULKA
            if (tid == 0 && i > 0 && i <= n_a) {
                // pass A's state after the segment before (in slot (i - 1) & 1): the start of segment i, into the slab
                bulk_store(my_slab - tid + (size_t)i * 2 * TL * THREADS, &sh.slot[(i - 1) & 1][0][0],
                           2 * TL * THREADS * sizeof(float4));
                if (i < n_a) bulk_read_but_one();  // the copy before it done reading slot i & 1, which segment i fills
                else bulk_done();                  // (pass B's first stage) the slab's states there for pass B's loads
            }
#endif
#if W16
            if (pass_b && i > n_a) flush(seg_of(i - 1));  // pass B's segment before: its tokens' dv, dbeta
#endif
#pragma unroll
            for (int r = 0; r < 512 / THREADS; ++r) {  // 2 x 8 x 32 fragments of each
                const int f = tid + r * THREADS, kb = f >> 8, m = (f >> 5) & 7, l = f & 31;
                const int s0 = 16 * m + (l >> 2), tk = 8 * kb + (l & 3);
                const float a0 = widen_k(rw.rk[tk][s0]), a1 = widen_k(rw.rk[tk][s0 + 8]);
                const float a2 = widen_k(rw.rk[tk + 4][s0]), a3 = widen_k(rw.rk[tk + 4][s0 + 8]);
                st.ak[kb][m][l] = make_float4(__uint_as_float(tf32(a0)), __uint_as_float(tf32(a1)),
                                              __uint_as_float(tf32(a2)), __uint_as_float(tf32(a3)));  // (16-bit: exact)
                st.akk[kb][m][l] = make_float4(__uint_as_float(tf32(a0 * a0)), __uint_as_float(tf32(a1 * a1)),
                                               __uint_as_float(tf32(a2 * a2)), __uint_as_float(tf32(a3 * a3)));
            }
            const bool lean = LEANA && !pass_b;  // (pass A's walk reads the fragments, values, gains, decays only)
            if ((!W16 || tid < 256) && !lean) {  // (W16: 256 of the 512 threads)
                const int t = tid >> 4, gg = (tid >> 1) & 7, e0 = 8 * (tid & 1);
                float kx[8], qx[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int n = 16 * ((e0 + e) >> 1) + gg + 8 * (e & 1);
                    kx[e] = widen_k(rw.rk[t][n]);
                    qx[e] = widen_k(rw.rq[t][n]);
                }
                float* kr = &st.kr[t][gg][e0];
#if !W16
                float* kkr = &st.kkr[t][gg][e0];
#endif
                float* qr = &st.qr[t][gg][e0];
                *reinterpret_cast<float4*>(kr) = make_float4(kx[0], kx[1], kx[2], kx[3]);
                *reinterpret_cast<float4*>(kr + 4) = make_float4(kx[4], kx[5], kx[6], kx[7]);
#if !W16
                *reinterpret_cast<float4*>(kkr) = make_float4(kx[0] * kx[0], kx[1] * kx[1], kx[2] * kx[2],
                                                              kx[3] * kx[3]);
                *reinterpret_cast<float4*>(kkr + 4) = make_float4(kx[4] * kx[4], kx[5] * kx[5], kx[6] * kx[6],
                                                                  kx[7] * kx[7]);
#endif
                *reinterpret_cast<float4*>(qr) = make_float4(qx[0], qx[1], qx[2], qx[3]);
                *reinterpret_cast<float4*>(qr + 4) = make_float4(qx[4], qx[5], qx[6], qx[7]);
#if PEEL && !W16
                float* kkt = &st.kkt[t][gg][e0];
                float kk[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) kk[e] = __uint_as_float(tf32(kx[e] * kx[e]));
                *reinterpret_cast<float4*>(kkt) = make_float4(kk[0], kk[1], kk[2], kk[3]);
                *reinterpret_cast<float4*>(kkt + 4) = make_float4(kk[4], kk[5], kk[6], kk[7]);
#endif
            }
            if (!W16 || tid < 256) {  // (W16: 256 of the 512 threads)
                const vt* pv = &rw.rv[0][0] + 4 * tid;  // 4 values, gains, output gradients a thread
                const vt* pb = &rw.rb[0][0] + 4 * tid;
                const vt* pd = &rw.rdy[0][0] + 4 * tid;
                *reinterpret_cast<float4*>(&st.vw[0][0] + 4 * tid) = make_float4(widen(pv[0]), widen(pv[1]),
                                                                                  widen(pv[2]), widen(pv[3]));
                *reinterpret_cast<float4*>(&st.bw[0][0] + 4 * tid) = make_float4(widen(pb[0]), widen(pb[1]),
                                                                                  widen(pb[2]), widen(pb[3]));
                if (!lean)
                    *reinterpret_cast<float4*>(&st.dyw[0][0] + 4 * tid) = make_float4(widen(pd[0]), widen(pd[1]),
                                                                                       widen(pd[2]), widen(pd[3]));
            }
            if (w == 0) {  // the log decays' running sums (tokens past the chunk add 0), and pass B's token factors
                const float gt = ln < SEG ? rw.g[ln] : 0.f;
                float x = gt;
                if (ln < SEG) st.gw[ln] = x;
#pragma unroll
                for (int o = 1; o < SEG; o <<= 1) {
                    const float y = __shfl_up_sync(0xffffffffu, x, o);
                    if (ln >= o) x += y;
                }
                if (ln < SEG) st.gs[ln] = x;
                // token t = ln of sub-block jb: rescaled from the sub-block's start where its decay stays above -TAU
                // (as pass B's loop decides), and peeled where the decay from it to the last token after it whose
                // state came from a product stays above -TSUB (that token's state less the terms between)
#if FAC
                if (!lean) {
                    const int sg = seg_of(i), ns = min(SEG, n_tok - sg * SEG);
                    const int jb = (ln >> 3) & 1, base = SUB * jb, last = max(base, min(base + SUB - 1, ns - 1));
                    const float g7 = __shfl_sync(0xffffffffu, x, SUB - 1), gl = __shfl_sync(0xffffffffu, x, last);
                    const float gb = jb ? g7 : 0.f;
                    const bool scaled = !(PROBE & 4) && gl - gb >= -TAU;
                    bool peeled = false;  // this token's state from the one after it
                    float ref = gl;       // the decay sum through the last token after it whose state came from a
                                          // product
#pragma unroll
                    for (int u = SUB - 2; u >= 0; --u) {  // the sub-block's tokens from its last but one down
                        const float gu = __shfl_sync(0xffffffffu, x, base + u);
                        const bool in = base + u < last, p = PEEL && scaled && in && ref - gu >= -TSUB;
                        if (base + u == ln) peeled = p;
                        if (in && !p) ref = gu;
                    }
                    const bool before = __shfl_up_sync(0xffffffffu, peeled, 1) && ln > base;  // the token before's
                    if (ln < SEG && i >= n_a)
                        st.fac[ln] = make_float4(scaled ? ex2((gb - x) * LOG2E) : 1.f,
                                                 scaled ? ex2((x - gb) * LOG2E) : 1.f, ex2(gt * LOG2E),
                                                 __uint_as_float((before ? PEELS : 0u) | (peeled ? PEELED : 0u)));
                }
#endif
            }
            __syncthreads();  // (also: every thread done reading the raw buffer)
            if (i + 1 < n_staged) {
                copy_in(seg_of(i + 1));
                if (i + 2 < n_staged) ask(seg_of(i + 2));
            }
        };
        // the states times a decay
        auto scale = [&](float f) {
#pragma unroll
            for (int m = 0; m < TL; ++m)
#pragma unroll
                for (int e = 0; e < 4; ++e) { M[m][e] *= f; J[m][e] *= f; }
        };
        // tokens 8 kb .. 8 kb + 7 added with B fragments (the lane's tokens 8 kb + tq and 8 kb + tq + 4, channel
        // cb_lane): M += K^T (w v), J += (K^2)^T (w beta)
        auto apply = [&](int kb, unsigned v0, unsigned v1, unsigned e0, unsigned e1) {
#pragma unroll
            for (int m = 0; m < TL; ++m) {
                mma(M[m], st.ak[kb][TL * hs + m][ln], v0, v1);
                mma(J[m], st.akk[kb][TL * hs + m][ln], e0, e1);
            }
        };
        // the true state after token `last` from the true state before token 8 kb (plainly: the start times its
        // decay, every token weighted by the decays after it; tokens past `last` weigh 0)
        auto walk_plain = [&](int kb, int last) {
            const float gl = st.gs[last], gb = kb ? st.gs[8 * kb - 1] : 0.f;
            scale(ex2((gl - gb) * LOG2E));
            const int ta = 8 * kb + tq, tb2 = ta + 4;
            const float wa = ta <= last ? ex2((gl - st.gs[ta]) * LOG2E) : 0.f;
            const float wb = tb2 <= last ? ex2((gl - st.gs[tb2]) * LOG2E) : 0.f;
            apply(kb, tf32(st.vw[ta][cb_lane] * wa), tf32(st.vw[tb2][cb_lane] * wb), tf32(st.bw[ta][cb_lane] * wa),
                  tf32(st.bw[tb2][cb_lane] * wb));
        };
        auto load_global = [&](const float* m, const float* ii, size_t at) {  // [P, N] rows, J = I - I_prior
#pragma unroll
            for (int mm = 0; mm < TL; ++mm)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const size_t o = at + (size_t)(e & 1) * N + 16 * (TL * hs + mm) + 8 * (e >> 1);
                    M[mm][e] = m[o];
                    J[mm][e] = ii[o] - ip;
                }
        };
        auto put = [&](float4* p) {  // 2 TL float4 a thread, THREADS apart
#pragma unroll
            for (int m = 0; m < TL; ++m) {
                p[m * THREADS] = make_float4(M[m][0], M[m][1], M[m][2], M[m][3]);
                p[(TL + m) * THREADS] = make_float4(J[m][0], J[m][1], J[m][2], J[m][3]);
            }
        };
        // (slab, BULKA) a slab state read past L1, whose lines from an earlier work item's reads the bulk copies
        // (which write L2) do not update
        auto get = [&](const float4* p, bool slab = false) {
#pragma unroll
            for (int m = 0; m < TL; ++m) {
                const bool past_l1 = BULKA && slab;
                const float4 a = past_l1 ? __ldcg(p + m * THREADS) : p[m * THREADS];
                const float4 b = past_l1 ? __ldcg(p + (TL + m) * THREADS) : p[(TL + m) * THREADS];
                M[m][0] = a.x; M[m][1] = a.y; M[m][2] = a.z; M[m][3] = a.w;
                J[m][0] = b.x; J[m][1] = b.y; J[m][2] = b.z; J[m][3] = b.w;
            }
        };
        auto slab_at = [&](int s) { return my_slab + (size_t)s * 2 * TL * THREADS; };
        auto slot_at = [&](int j) { return &sh.slot[j][0][tid]; };
        auto ask_state = [&](const float4* p) {  // a slab state's 512 lines of 128 bytes asked for in L2
            const float4* base = p - tid;
            prefetch_l2(base + 8 * tid);
            if (THREADS < 512) prefetch_l2(base + 8 * (tid + THREADS));
        };

        // pass A: the chunk walked from its checkpoint a segment at a time, every segment's start kept in the slab
        load_global(ck_m, ck_i, ck);
        put(slab_at(0));  // (pass B reads every segment's start from the slab)
        copy_in(seg_of(0));
        if (n_staged > 1) ask(seg_of(1));
        for (int s = 0; s < n_a; ++s) {
            stage(s, false);
            walk_plain(0, SUB - 1);  // (a whole segment: both of its sub-blocks)
            walk_plain(1, SEG - 1);
#if BULKA
            put(slot_at(s & 1));  // (the next stage's bulk copy stores it into the slab)
            fence_to_bulk();
#else
            if (!(PROBE & 128)) put(slab_at((PROBE & 64) ? 1 : s + 1));
#endif
        }

        // pass B
#pragma unroll
        for (int m = 0; m < TL; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) { dM[m][e] = 0.f; dI[m][e] = 0.f; }
        float an = 0.f;  // the decay of the token after the one reversed (the adjoint's factor)
        // a token's dv, dbeta (its lane partials pv, pb, over the 8 row groups: lane bits 2-4, reduce-scattered) and
        // decay gradient (dgl, over the warp) summed and written
        auto finish = [&](int tt, long long tok, float pv0, float pv1, float pb0, float pb1, float dgl) {
            const float z0 = (b4 ? pb0 : pv0) + __shfl_xor_sync(0xffffffffu, b4 ? pv0 : pb0, 16);
            const float z1 = (b4 ? pb1 : pv1) + __shfl_xor_sync(0xffffffffu, b4 ? pv1 : pb1, 16);
            float z = (b3 ? z1 : z0) + __shfl_xor_sync(0xffffffffu, b3 ? z0 : z1, 8);
            z += __shfl_xor_sync(0xffffffffu, z, 4);
            if (!b2) {
#if W16
                st.part[tt][hs][b4][c0 + b3] = z;
#else
                const size_t at = ((size_t)tok * H + h) * P + cb * CW + c0 + b3;
                (b4 ? dbeta : dv)[at] = to_vt(z);
#endif
            }
#if !(PROBE & 2)
#pragma unroll
            for (int o = 16; o >= 1; o >>= 1) dgl += __shfl_xor_sync(0xffffffffu, dgl, o);
            if (ln == 0 && (!(PROBE & 16) || dgl == 12345.f)) red_add(dg + (size_t)tok * H + h, dgl);
#endif
        };
        // the reverse step of token tt (its state in M, J, rescaled by 1 / A: ``inv``); with ``peel`` true it
        // leaves the token before's state in M, J: the token's term (v / A) k, (beta / A) k^2 subtracted with the
        // operands its products read, so the term leaves as it came in
        auto reverse = [&](bool peel, int tt, long long tok, float inv, float A) {
            const float ipi = ip * inv;
            const float2 vv = *reinterpret_cast<const float2*>(&st.vw[tt][c0]);
            const float2 bb = *reinterpret_cast<const float2*>(&st.bw[tt][c0]);
            const float2 gg = *reinterpret_cast<const float2*>(&st.dyw[tt][c0]);
            const float vc[2] = {vv.x, vv.y}, bc[2] = {bb.x, bb.y}, gc[2] = {gg.x, gg.y};
            const float gsc[2] = {gg.x * inv, gg.y * inv};
#if K2
            const float bc2[2] = {2.f * bb.x, 2.f * bb.y};  // (2 b: dk's 2 k (dI . b) as k (dI . 2 b), the same bits)
#endif
            // (peel) the token's weighted value and gain as its products' B fragments have them
            float wv[2] = {0.f, 0.f}, wb[2] = {0.f, 0.f};
            if (peel) {
#pragma unroll
                for (int cc = 0; cc < 2; ++cc) {
                    wv[cc] = __uint_as_float(tf32(vc[cc] * inv));
                    wb[cc] = __uint_as_float(tf32(bc[cc] * inv));
                }
            }
            float pv[2] = {0.f, 0.f}, pb[2] = {0.f, 0.f}, ss = 0.f;
#if SSPLIT
            float sp[4] = {0.f, 0.f, 0.f, 0.f};  // <dM, M>, <dI, J> of the lane's channels c0, c0 + 1
#endif
            float qk[4][2][2];  // a pair of tile pairs' sums over the lane's channels: [tile][h][dq, dk]
#pragma unroll
            for (int jj = 0; jj < TL / 2; ++jj) {
                const int jg = TL / 2 * hs + jj;  // the tile pair of the CTA's 4
                const float4 K = *reinterpret_cast<const float4*>(&st.kr[tt][gq][4 * jg]);
#if W16
                const float4 KQ = make_float4(K.x * K.x, K.y * K.y, K.z * K.z, K.w * K.w);  // as the stage squares
#else
                const float4 KQ = *reinterpret_cast<const float4*>(&st.kkr[tt][gq][4 * jg]);
#endif
                const float4 Q = *reinterpret_cast<const float4*>(&st.qr[tt][gq][4 * jg]);
                const float kv[4] = {K.x, K.y, K.z, K.w}, kq[4] = {KQ.x, KQ.y, KQ.z, KQ.w};
                float kkp[4] = {0.f, 0.f, 0.f, 0.f};  // (peel) the squared keys as tf32, as the products read them
#if PEEL && W16
                if (peel) {
#pragma unroll
                    for (int u = 0; u < 4; ++u) kkp[u] = __uint_as_float(tf32(kq[u]));
                }
#elif PEEL
                if (peel) {
                    const float4 KT = *reinterpret_cast<const float4*>(&st.kkt[tt][gq][4 * jg]);
                    kkp[0] = KT.x; kkp[1] = KT.y; kkp[2] = KT.z; kkp[3] = KT.w;
                }
#endif
                const float qf[4] = {Q.x, Q.y, Q.z, Q.w};
#pragma unroll
                for (int u = 0; u < 4; ++u) {  // state 16 m + gq + 8 hh of tile m
                    const int m = 2 * jj + (u >> 1), hh = u & 1;
                    float dqa = 0.f, dka = 0.f, dkb = 0.f;
#pragma unroll
                    for (int cc = 0; cc < 2; ++cc) {
                        const int e = 2 * hh + cc;
                        const float rr = (PROBE & 32) ? (J[m][e] + ipi) * 0.5f : rcp(J[m][e] + ipi);
                        const float mu = M[m][e] * rr;
                        const float tqv = gsc[cc] * qf[u] * rr;
                        dM[m][e] = fmaf(an, dM[m][e], tqv);
                        dI[m][e] = fmaf(an, dI[m][e], -tqv * mu);
                        dqa = fmaf(mu, gc[cc], dqa);
                        dka = fmaf(dM[m][e], vc[cc], dka);
#if K2
                        dkb = fmaf(dI[m][e], bc2[cc], dkb);
#else
                        dkb = fmaf(dI[m][e], bc[cc], dkb);
#endif
                        pv[cc] = fmaf(dM[m][e], kv[u], pv[cc]);
                        pb[cc] = fmaf(dI[m][e], kq[u], pb[cc]);
#if SSPLIT
                        sp[2 * cc] = fmaf(dM[m][e], M[m][e], sp[2 * cc]);
                        sp[2 * cc + 1] = fmaf(dI[m][e], J[m][e], sp[2 * cc + 1]);
#else
                        ss = fmaf(dM[m][e], M[m][e], ss);
                        ss = fmaf(dI[m][e], J[m][e], ss);
#endif
                        if (peel) {  // the token's term taken back out, exactly
                            M[m][e] = fmaf(-(KT_F32 ? __uint_as_float(tf32(kv[u])) : kv[u]), wv[cc], M[m][e]);
                            J[m][e] = fmaf(-kkp[u], wb[cc], J[m][e]);
                        }
                    }
                    qk[2 * (jj & 1) + (u >> 1)][hh][0] = dqa;
                    qk[2 * (jj & 1) + (u >> 1)][hh][1] = fmaf(K2 ? kv[u] : 2.f * kv[u], dkb, dka);
                }
#if !(PROBE & 2)
                if (jj & 1) {
                    // tiles 4 p .. 4 p + 3 (p = jj / 2): dq, dk of their 2 x 4 states summed over the 4 channel
                    // pairs (lane bits 1, 0) and reduce-scattered, lane tq keeping tile 4 p + tq: four-state
                    // vectors [token, group, p, g, tile, h, (dq, dk)]
                    float x[2][2][2];
#pragma unroll
                    for (int lo = 0; lo < 2; ++lo)
#pragma unroll
                        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                            for (int xx = 0; xx < 2; ++xx)
                                x[lo][hh][xx] = (b1 ? qk[2 + lo][hh][xx] : qk[lo][hh][xx])
                                    + __shfl_xor_sync(0xffffffffu, b1 ? qk[lo][hh][xx] : qk[2 + lo][hh][xx], 2);
                    float y[2][2];
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                        for (int xx = 0; xx < 2; ++xx)
                            y[hh][xx] = (b0 ? x[1][hh][xx] : x[0][hh][xx])
                                + __shfl_xor_sync(0xffffffffu, b0 ? x[0][hh][xx] : x[1][hh][xx], 1);
                    if (!(PROBE & 16) || y[0][0] == 12345.f)
                        red_add4(dqk + (((size_t)tok * G + ig) * 2 + (jg >> 1)) * N + 16 * gq + 4 * tq,
                                 y[0][0], y[0][1], y[1][0], y[1][1]);
                }
#else
#if SSPLIT  // (a test no value passes, on a sum the loop builds, so that the partial sums stay live)
                if (sp[0] == 12345.f) red_add(dqk, qk[0][0][0] + qk[1][1][1] + qk[2][0][1] + qk[3][1][0]);
#else
                if (ss == 12345.f) red_add(dqk, qk[0][0][0] + qk[1][1][1] + qk[2][0][1] + qk[3][1][0]);
#endif
#endif
            }
#if SSPLIT
            ss = (sp[0] + sp[1]) + (sp[2] + sp[3]);
#endif
            // decay gradient: a_t <dM, M_{t-1}> + a_t <dI, J_{t-1}> = <dM, M_t> - v . dv + <dI, J_t> - b . db
            float dgl = ss * A - (vc[0] * pv[0] + vc[1] * pv[1] + bc[0] * pb[0] + bc[1] * pb[1]);
            finish(tt, tok, pv[0], pv[1], pb[0], pb[1], dgl);
        };
        int ps = 0;  // the slot of the segment's start; the other takes the state before its token 8
        for (int s = n_seg - 1; s >= 0; --s) {
            stage(n_a + n_seg - 1 - s, true);  // (its wait covers the copy of the segment's start into slot ps)
            const int n_s = min(SEG, n_tok - s * SEG), nb = (n_s + SUB - 1) / SUB;
            const long long tseg = bos + t0 + s * SEG;  // the segment's first token
            if (!SLABCP || s == n_seg - 1) {  // the chunk's last segment: its start from the slab
                get(slab_at(s), true);
                put(slot_at(ps));
            } else {
                get(slot_at(ps));
            }
            if (s > 0) ask_state(slab_at(s - 1));  // the next segment's start, in L2 by the time it is copied
            if (nb > 1) {  // the state before token 8
                walk_plain(0, SUB - 1);
                put(slot_at(ps ^ 1));
            }
            for (int j = nb - 1; j >= 0; --j) {
                const int slot = j ? ps ^ 1 : ps;
                if (SLABCP && !j && s > 0) {
                    // the next segment's start copied from the slab into the slot this one no longer reads (a
                    // thread's own 2 TL float4: it alone reads them, after the next stage's wait)
                    const float4* from = slab_at(s - 1);
                    float4* to = slot_at(ps ^ 1);
#pragma unroll
                    for (int x = 0; x < 2 * TL; ++x) cp16(to + x * THREADS, from + x * THREADS, true);
                    commit();
                }
                const int base = SUB * j, last = min(base + SUB - 1, n_s - 1);
                const float gb = j ? st.gs[base - 1] : 0.f;
                // rescaled from the sub-block's start where its decay allows (M' = M / A, A its decay so far;
                // tokens weighted by 1 / A at themselves), else plainly
                const bool rescaled = st.gs[last] - gb >= -TAU;
                const int ta = base + tq, tb2 = ta + 4;
                const float ea = ex2((gb - st.gs[ta]) * LOG2E), eb = ex2((gb - st.gs[tb2]) * LOG2E);
                const unsigned va = tf32(st.vw[ta][cb_lane] * ea), vb = tf32(st.vw[tb2][cb_lane] * eb);
                const unsigned ba = tf32(st.bw[ta][cb_lane] * ea), bb2 = tf32(st.bw[tb2][cb_lane] * eb);
                // each token's state from a product (its sub-block's start and the tokens up to it), or peeled from
                // the state after it where the log decay from it to the last state from a product stays above -TSUB
                // (the errors of the state peeled from grow by that decay; the stage's flags)
#if FAC
                float4 next = st.fac[last];  // 1 / A, A, the token's decay, its flags (the stage's), a token ahead
#else
                int ref = last;     // the last token whose state came from a product
                bool held = false;  // M, J hold the token's state (peeled by the token after it)
#endif
                for (int tt = last; tt >= base; --tt) {
                    const int r = tt - base;
#if FAC
                    const float4 fac = next;
                    if (tt > base) next = st.fac[tt - 1];
                    const unsigned flags = __float_as_uint(fac.w);
#else
                    const unsigned flags = held ? PEELED : 0u;
#endif
                    if (!(flags & PEELED)) {
                        get(slot_at(slot));
                        if (!(PROBE & 4)) {
                            if (rescaled) {
                                const bool a_in = tq <= r, b_in = tq + 4 <= r;  // the lane's tokens up to tt
                                apply(j, a_in ? va : 0u, b_in ? vb : 0u, a_in ? ba : 0u, b_in ? bb2 : 0u);
                            } else {
                                walk_plain(j, tt);
                            }
                        }
#if !FAC
                        ref = tt;
#endif
                    }
#if !FAC
                    const bool scaled = rescaled && !(PROBE & 4);
                    const float4 fac = make_float4(scaled ? ex2((gb - st.gs[tt]) * LOG2E) : 1.f,
                                                   scaled ? ex2((st.gs[tt] - gb) * LOG2E) : 1.f,
                                                   ex2(st.gw[tt] * LOG2E), 0.f);
                    const bool peel = PEEL && scaled && tt > base && st.gs[ref] - st.gs[tt - 1] >= -TSUB;
                    held = peel;
#else
                    const bool peel = PEEL && (flags & PEELS);
#endif
                    // (1 / A as the B fragments' weights have it; two copies of the step, each with its constant)
                    if (peel) reverse(true, tt, tseg + tt, fac.x, fac.y);
                    else reverse(false, tt, tseg + tt, fac.x, fac.y);
                    an = fac.z;
                }
            }
            ps ^= 1;
        }
#if W16
        __syncthreads();  // every warp's sums of the chunk's first segment written
        flush(0);
#endif
        // the chunk's local adjoint of the state before its first token: a_first dM, a_first dI (the work item's
        // indices taken again from an opaque copy of `work`, so that none of them stays live through the passes)
        int wk = work;
        asm volatile("" : "+r"(wk));
        const int hb_e = wk % (H * PB), rest_e = wk / (H * PB);
        const int c_e = rest_e % max_chunks, sq_e = rest_e / max_chunks, h_e = hb_e / PB;
        const size_t pq = (size_t)((hb_e % PB) * CW + c0) * N + gq;
        float* om = nullptr;
        float* oi = nullptr;
        size_t at = 0;
        if (c_e > 0) {
            const long long boc_e = bounds(sq_e, cu_seqlens, chunk_offsets, T, n_chunks).boc;
            const long long slot0 = boc_e - sq_e > 0 ? boc_e - sq_e : 0;
            at = ((size_t)(slot0 + c_e - 1) * H + h_e) * P * N + pq;
            om = lm; oi = li;
        } else {
            at = ((size_t)sq_e * H + h_e) * P * N + pq;
            om = dm0; oi = di0;
        }
#pragma unroll
        for (int m = 0; m < TL; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // (channel e & 1, state 16 m + gq + 8 (e >> 1))
                const size_t o = at + (size_t)(e & 1) * N + 16 * (TL * hs + m) + 8 * (e >> 1);
                if (om) om[o] = an * dM[m][e];
                if (oi) oi[o] = an * dI[m][e];
            }
    }
}
"""


def shared_bytes(dtype: torch.dtype = torch.bfloat16, key_dtype: torch.dtype | None = None,
                 tsub: float = TSUB, w16: bool = False) -> int:
    """The dynamic shared memory of a CTA: two state slots (64 KB each) and one segment's inputs (keys and squared
    keys as tensor-core fragments and as permuted rows, queries permuted, values, gains and output gradients in
    float32, the log decays and their sums, and the rows as copied: values, gains and output gradients in ``dtype``,
    keys and queries in ``key_dtype``, the same by default; pass B's factors of each token; with ``tsub`` above 0 the
    squared keys' rows once more, rounded to TF32 for the peeled states). ``w16`` (the timing macro ``W16``): no squared
    keys' rows (the reverse step squares the keys' rows), and each state half's ``dv``, ``dbeta`` sums of a segment's
    tokens."""
    key_dtype = key_dtype or dtype
    slots = SLOTS * STATES * CHANNELS * 2 * 4
    fragments = 2 * 2 * 8 * 32 * 16
    rows = (2 if w16 else 4 if tsub > 0 else 3) * SEG * 8 * ROW * 4
    halves = SEG * 2 * 2 * (CHANNELS + 8) * 4 if w16 else 0
    channels = 3 * SEG * CHANNELS * 4
    raw = SEG * (2 * STATES * key_dtype.itemsize + 3 * CHANNELS * dtype.itemsize) + SEG * 4
    return slots + fragments + rows + channels + 2 * SEG * 4 + SEG * 16 + halves + raw


# the source's timing macros that ``defines`` may set
TIMING_MACROS = ("BULKA", "FAC", "FIXCP", "K2", "LEANA", "SLABCP", "SSPLIT", "W16")


def timing_macros(defines: str) -> dict:
    """``"FAC=0+SLABCP"`` -> ``{"FAC": "0", "SLABCP": "1"}`` (a name alone means 1); a name outside ``TIMING_MACROS``
    raises ``ValueError`` (``PEEL`` and ``TSUB`` come from ``tsub``, the shared-memory size from both)."""
    macros = {}
    for item in filter(None, defines.split("+")):
        name, _, value = item.partition("=")
        if name not in TIMING_MACROS:
            raise ValueError(f"CUDA_DEFINES {defines!r}: {name} is not one of the timing macros "
                             f"{', '.join(TIMING_MACROS)} (CUDA_TSUB sets the peeling)")
        macros[name] = value or "1"
    return macros


def wide(defines: str) -> bool:
    """Whether ``defines`` asks for the timing macro ``W16`` (16 warps a CTA, 512 threads)."""
    return timing_macros(defines).get("W16", "0") not in ("0", "")


def threads(defines: str = "") -> int:
    """A CTA's threads in the build that ``defines`` names."""
    return 2 * THREADS if wide(defines) else THREADS


def layout_options(threads: int = THREADS) -> list[str]:
    """The layout's constants as the source's macros, so that the module and the kernel share one definition."""
    return [f"-DN={STATES}", f"-DCW={CHANNELS}", f"-DTHREADS={threads}", f"-DSEG={SEG}", f"-DSUB={SUB}",
            f"-DROW={ROW}", f"-DTAU={TAU!r}f"]


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  arch: str = "sm_90a", probe: int = 0, key_dtype: torch.dtype | None = None,
                  tsub: float = TSUB, defines: str = "") -> bytes:
    """The local pass compiled for ``arch`` (a CPU is enough): the cubin's bytes (``probe``: the timing bits of
    the source's ``PROBE``, which leave parts out; ``tsub``: its ``TSUB``, 0 for no peeled states; ``defines``:
    timing macros of a variant, ``"FAC=0+SLABCP=1"``)."""
    if not 0 <= tsub <= TAU:
        raise ValueError(f"CUDA_TSUB {tsub}: a log decay from 0 (no peeled states) to {TAU:g}")
    options = [f"--gpu-architecture={arch}", "-std=c++17", *layout_options(threads(defines)),
               *dtype_options(dtype, key_dtype), f"-DH={heads}", f"-DG={groups}", f"-DP={head_dim}", f"-DCT={chunk}",
               f"-DVARLEN={int(varlen)}", f"-DPROBE={probe}",
               f"-DPEEL={int(tsub > 0)}", f"-DTSUB={float(tsub)!r}f",
               *(f"-D{name}={value}" for name, value in timing_macros(defines).items())]
    return cuda_build.compile_source(SOURCE, "palimpsa_bwd_local.cu", options, "the local pass")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, varlen: bool,
            probe: int = 0, key_dtype: torch.dtype | None = None, tsub: float = TSUB, defines: str = ""):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, arch=cuda_build.arch(device),
                          probe=probe, key_dtype=key_dtype, tsub=tsub, defines=defines)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes(dtype, key_dtype, tsub, wide(defines)))


def slab_states(chunk: int) -> int:
    """The states of a CTA's slab: every segment's start, the chunk's checkpoint first."""
    return max(1, chunk // SEG)


def unsupported(v, k, q, beta, log_decay, dy, du, chunk_size: int) -> str | None:
    """Why the CUDA local pass cannot take these inputs (None where it can)."""
    if not v.is_cuda:
        return "not a CUDA tensor"
    reason = cuda_build.tf32_dtype_reason(v, k, "its tensor-core state updates")
    if reason is not None:
        return reason
    if beta is None or any(t.dtype != v.dtype for t in (beta, dy)) or q.dtype != k.dtype:
        return "beta absent, gains or output gradients in another dtype than v, or queries than keys"
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


def states_of_sums(sums: torch.Tensor) -> torch.Tensor:
    """The kernel's ``dq``, ``dk`` sums, ``[tokens, groups, 256]`` in its order (tile pair ``p``, row group ``g``,
    lane ``t``, ``h``, then ``dq``, ``dk``: state ``16 (4 p + t) + 8 h + g``), as ``[tokens, groups, 128, 2]``."""
    tokens, groups = sums.shape[:2]
    return sums.view(tokens, groups, 2, 8, 4, 2, 2).permute(0, 1, 2, 4, 5, 3, 6).reshape(tokens, groups, STATES, 2)


def launch(v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets,
           n_states, max_chunks, chunk_size, probe: int = 0, tsub: float | None = None, defines: str = ""):
    """The local pass into the chunked backward's buffers (``dv``, ``dbeta`` written; ``dk``, ``dq``, ``dg`` added
    to; ``lm``, ``li``, ``dm0``, ``di0`` as the Triton pass writes them); ``probe``: as :func:`compile_cubin`'s.
    ``dq`` and ``dk`` are summed by the kernel into one scratch of four-state vectors (a vector atomic a lane, tile
    pair and token), then added to their buffers."""
    _, length, heads, head_dim = v.shape
    groups = k.shape[2]
    varlen = cu_seqlens is not None
    n_work = n_states * max_chunks * heads * (head_dim // CHANNELS)
    if n_work == 0:  # nothing to walk (an empty grid is a launch error)
        return
    device = v.device.index if v.device.index is not None else torch.cuda.current_device()
    tsub = TSUB if tsub is None else float(tsub)
    func = _kernel(device, v.dtype, heads, groups, head_dim, chunk_size, varlen, probe, k.dtype, tsub, defines)
    grid = programs(v.device, n_work)
    v, k, q, beta, dy = (cuda_build.aligned(t) for t in (v, k, q, beta, dy))
    log_decay = log_decay.float().contiguous()
    slab = torch.empty((grid * slab_states(chunk_size) * 2 * CHANNELS * STATES,), dtype=torch.float32,
                       device=v.device)  # 64 KB a state: a thread's 16 float4 (W16: 8), THREADS apart
    tokens = v.shape[0] * length
    sums = torch.zeros((tokens, groups, 2 * STATES), dtype=torch.float32, device=v.device)
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, slab, lm, li, dv, sums, dg, dbeta, dm0, di0,
               cu_seqlens.to(torch.int32) if varlen else empty, offsets.to(torch.int32) if varlen else empty]
    n_chunks = 0 if varlen else max_chunks
    cuda_build.launch(func, v.device, (grid, 1, 1), threads(defines),
                      shared_bytes(v.dtype, k.dtype, tsub, wide(defines)), tensors,
                      [length, n_chunks, max_chunks, n_work])
    both = states_of_sums(sums)
    dq.view(tokens, groups, STATES).add_(both[..., 0])
    dk.view(tokens, groups, STATES).add_(both[..., 1])
