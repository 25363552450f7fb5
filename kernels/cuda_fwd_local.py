"""The chunk-parallel forward's local pass in CUDA C++, compiled at run time by NVRTC, its products on tensor cores
(docs/kernels.md, "The local pass in CUDA C++ (forward; ...)"); the default on compute capability 9.x.

``chunked_fwd.py``'s first launch gives every chunk but a sequence's last its end state from a zero start,
``sum_t w_t v_t (x) k_t`` and ``sum_t w_t beta_t (x) k_t^2`` (``w_t`` the exponential of the chunk's log decays
after token ``t``), into the next chunk's checkpoint slot. Its Triton kernel takes 0.235 ms at B = 1, L = 8192 on an
H200 (0.887 at B = 4); this kernel 0.145 (0.519) on sm_90a and 0.205 (0.742) in its mma.sync form
(docs/bench/fwd-local-2026-11-29, call 14). The mapping:

* a CTA of 8 warps takes one (sequence, head, chunk, block of 64 channels);
* the chunk's weights first: each thread sums the log decays of its tokens, the warp and the CTA add the sums of the
  tokens after them (a sum over exactly the tokens after each, never a difference), one exponential a token;
* stages of 32 tokens (keys, values, gains as they come) copied by ``cp.async`` a stage ahead into rows padded so
  that the 4 token rows a fragment reads fall in different banks, each thread's copies at fixed offsets;
* on sm_90a (``WGMMA``), warpgroup products (``wgmma.m64n64k8``, TF32): warpgroup ``wg`` the 64 states ``64 wg ..``,
  ``M`` and ``J`` each a 64 x 64 accumulator (32 registers a thread); each stage the CTA writes the weighted values
  and gains once, rounded to TF32, as the B operands (a channel's 32 tokens in a 128-byte row, the 128-byte
  swizzle), and each warp builds its keys' and squared keys' A fragments in registers (16-bit keys are TF32
  exactly; squared and float32 keys are rounded);
* elsewhere (other targets, where asked for), ``mma.m16n8k8``: warp ``w`` the 32 states ``32 (w >> 1) ..``
  and the 32 channels ``32 (w & 1) ..``, 2 x 4 accumulators for ``M`` and for ``J``, each warp building its own
  fragments;
* the end states written as ``M`` and ``J = I - I_prior`` into the next chunk's slot, which the carry turns into the
  checkpoint.

The products' operands are rounded to nearest TF32 (``cvt.rna``); the checkpoints differ from the Triton kernel's by
4.1e-4 relative (call 12), and both pass the float64 checks of ``scripts/check_scan_gpu.py``.
"""

import functools

import torch

from . import cuda_build
from .cuda_build import dtype_options, nvrtc

# 1: the chunked forward's local pass in this kernel wherever it can run (else an error); auto: where it can run on
# compute capability 9.x, Triton's elsewhere; 0: Triton's. DEFAULT is what an unset key and variable mean
ENV = "PALIMPSA_CUDA_FWD_LOCAL"
DEFAULT = "auto"
STATES = 128  # the state size the kernel is written for
CHANNELS = 64  # a CTA's channels
THREADS = 256  # 8 warps: two warpgroups of 64 states (wgmma), or warps of 32 states x 32 channels (mma.sync)
STAGE = 32  # tokens a shared-memory stage (4 tensor-core k-steps)
PAD = 8  # elements a staged row is padded by (bank conflicts)
KERNEL = "palimpsa_fwd_local_cuda"
MAX_SEQUENCES = 65535  # the grid's third dimension: one a sequence
# the Triton kernel's keys, which this kernel has no use for: a config that names them asks for the Triton kernel
TRITON_KEYS = ("BP", "BK", "BT", "DOT", "local_warps", "SUFFIX")
# the products as warpgroup products (wgmma) where the target is sm_90a; False: mma.sync everywhere (the first form,
# kept for targets other than sm_90a and for comparison)
WGMMA = True
FAILED = None  # why the kernel failed to compile or load in this process (then auto leaves it to Triton)

SOURCE = cuda_build.HELPERS + cuda_build.TENSOR_CORE_HELPERS + r"""
// N, CW, THREADS, ST, PAD come from layout_options() (the module's constants)
#define KROW (N + PAD)          // a staged key row (its padding puts the 4 token rows a fragment reads in other banks)
#define VROW (CW + PAD)         // a staged value or gain row
#define LOG2E 1.4426950408889634f
#if CT % THREADS != 0 || CT % ST != 0
#error "CT must be a multiple of THREADS and ST"
#endif
struct Raw {                    // a stage's inputs as copied
    kt k[ST][KROW];
    vt v[ST][VROW];
    vt b[ST][VROW];
};
struct Shared {
    Raw raw[2];                 // this stage's, and the next one's being copied
    float w[CT];                // each token's weight: the exponential of the chunk's log decays after it
    float part[THREADS / 32];   // each warp's sum of its tokens' log decays
};

__device__ __forceinline__ void wait_copies_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
#if WGMMA
#define WROW 128                // bytes a B operand row: a channel's ST tokens in TF32, the 128-byte swizzle's width
#if ST * 4 != WROW || CW != 64
#error "the warpgroup products take stages of 32 tokens and CTAs of 64 channels"
#endif
// the dynamic shared memory: Shared, then (from the next multiple of 1024 bytes) the two B operands
#define SHARED_BYTES (sizeof(Shared) + 1023 + 2 * CW * WROW)
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// a key as TF32: 16-bit keys are TF32 exactly, float32 ones are rounded
__device__ __forceinline__ unsigned key_tf32(float x) {
#if KT_F32
    return tf32(x);
#else
    return __float_as_uint(x);
#endif
}
// the descriptor of a B operand at shared address a: K-major rows of 128 bytes in the 128-byte swizzle (mode 1 in
// bits 62-63), 8-row groups 1024 bytes apart (the stride, bits 32-45, in 16-byte units); the leading offset (bits
// 16-29) unused by this layout
__device__ __forceinline__ unsigned long long operand(unsigned a) {
    return (unsigned long long)((a & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
           | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// the accumulators as the products left them: no access moves across this point
__device__ __forceinline__ void hold(float (&d)[32]) {
#pragma unroll
    for (int e = 0; e < 32; ++e) asm volatile("" : "+f"(d[e]) :: "memory");
}
// d (64 x 64, the warpgroup's) += a (64 x 8, TF32 fragments in registers) b (8 x 64, TF32 in shared memory)
__device__ __forceinline__ void wgmma_tf32(float (&d)[32], const unsigned (&a)[4], unsigned long long b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#else
#define SHARED_BYTES sizeof(Shared)
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 2)
palimpsa_fwd_local_cuda(const vt* __restrict__ v, const kt* __restrict__ k, const float* __restrict__ g,
                        const vt* __restrict__ beta, float* __restrict__ ck_m, float* __restrict__ ck_i,
                        const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets, int T,
                        int n_chunks)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    const int c = blockIdx.x, h = blockIdx.y / (P / CW), cb = blockIdx.y % (P / CW), sq = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31, gq = ln >> 2, tq = ln & 3;
    const int ig = h / (H / G);
    const Bounds sb = bounds(sq, cu_seqlens, chunk_offsets, T, n_chunks);
    const long long bos = sb.bos, boc = sb.boc;
    const int t0 = c * CT;
    if (t0 + CT >= sb.len) return;  // a sequence's last chunk (no checkpoint after it), or past its end
    const long long tc = bos + t0;  // the chunk's first token: every chunk taken here is whole

    // a stage's copies, each thread's at fixed offsets: its i-th 16-byte chunk is tid + THREADS i of the stage's
    // key rows (KC chunks a row), then of its value and gain rows (VC a row); kq, vq its first ones at stage 0
    constexpr int KC = N / KPC, VC = CW / VPC;
    static_assert(THREADS % KC == 0 && THREADS % VC == 0 && (ST * KC) % THREADS == 0 && (ST * VC) % THREADS == 0,
                  "a stage's copies split evenly, at fixed columns");
    const kt* const kq = k + ((size_t)(tc + tid / KC) * G + ig) * N + (tid % KC) * KPC;
    const size_t vq = ((size_t)(tc + tid / VC) * H + h) * P + cb * CW + (tid % VC) * VPC;
    auto copy_in = [&](int s) {  // stage s's tokens into raw[s & 1]
        Raw& rw = sh.raw[s & 1];
        const kt* const ks = kq + (size_t)s * ST * G * N;
#pragma unroll
        for (int i = 0; i < ST * KC / THREADS; ++i)
            cp16(&rw.k[tid / KC + THREADS / KC * i][(tid % KC) * KPC], ks + (size_t)(THREADS / KC * i) * G * N, true);
        const size_t vs = vq + (size_t)s * ST * H * P;
#pragma unroll
        for (int i = 0; i < ST * VC / THREADS; ++i) {
            const size_t row = vs + (size_t)(THREADS / VC * i) * H * P;
            cp16(&rw.v[tid / VC + THREADS / VC * i][(tid % VC) * VPC], v + row, true);
            cp16(&rw.b[tid / VC + THREADS / VC * i][(tid % VC) * VPC], beta + row, true);
        }
        commit();
    };
    copy_in(0);

    {   // the weights: thread tid's E consecutive tokens, the warp's and the CTA's later tokens added
        constexpr int E = CT / THREADS;
        float x[E], own[E], total = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = g[(size_t)(tc + tid * E + e) * H + h];
#pragma unroll
        for (int e = E - 1; e >= 0; --e) { own[e] = total; total += x[e]; }  // this thread's tokens after e
        float incl = total;  // the lanes from this one up: their tokens' sums
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_down_sync(0xffffffffu, incl, o);
            if (ln + o < 32) incl += y;
        }
        float later = __shfl_down_sync(0xffffffffu, incl, 1);  // the warp's lanes after this one
        if (ln == 31) later = 0.f;
        if (ln == 0) sh.part[w] = incl;
        __syncthreads();
        float warps = 0.f;  // the warps after this one
        for (int u = w + 1; u < THREADS / 32; ++u) warps += sh.part[u];
#pragma unroll
        for (int e = 0; e < E; ++e) sh.w[tid * E + e] = ex2((own[e] + (later + warps)) * LOG2E);
    }

#if WGMMA
    // the products as warpgroup products (wgmma, sm_90a): warpgroup wg the 64 states 64 wg ..; a stage's weighted
    // values and gains as the B operands in shared memory (a channel's row of ST tf32 tokens, 128 bytes, in the
    // 128-byte swizzle), the keys and squared keys as A fragments in registers (warp wi of the group: states
    // 16 wi + gq, + 8; tokens tq, tq + 4 of each k-step)
    const int wg = w >> 2, wi = w & 3;
    float M[32], J[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) { M[e] = 0.f; J[e] = 0.f; }
    // the B operands after Shared, at the next 1024 bytes (the swizzle's pattern repeats every 8 rows of 128 bytes)
    const unsigned wbv = (smem_addr(smem_raw) + (unsigned)sizeof(Shared) + 1023u) & ~1023u, wbb = wbv + CW * WROW;
    unsigned char* const wb_v = smem_raw + (wbv - smem_addr(smem_raw));
    unsigned char* const wb_b = wb_v + CW * WROW;
    constexpr int NST = CT / ST;
    for (int s = 0; s < NST; ++s) {
        wait_copies();
        // stage s landed; the B operands free (every warpgroup's products of stage s - 1 done), and the inputs' buffer
        // of stage s - 1
        __syncthreads();
        if (s + 1 < NST) copy_in(s + 1);
        const Raw& rw = sh.raw[s & 1];
        {   // the B operands: warp w the tokens 4 w .. 4 w + 3 (one 16-byte chunk of a row), lane ln the channels ln
            // and ln + 32; chunk w of row c is stored at chunk w ^ (c & 7) (the 128-byte swizzle)
            const float4 wt = *reinterpret_cast<const float4*>(&sh.w[s * ST + 4 * w]);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int ch = ln + 32 * half;
                const unsigned off = ch * WROW + ((w ^ (ch & 7)) << 4);
                const uint4 xv = make_uint4(
                    tf32(widen(rw.v[4 * w][ch]) * wt.x), tf32(widen(rw.v[4 * w + 1][ch]) * wt.y),
                    tf32(widen(rw.v[4 * w + 2][ch]) * wt.z), tf32(widen(rw.v[4 * w + 3][ch]) * wt.w));
                const uint4 xb = make_uint4(
                    tf32(widen(rw.b[4 * w][ch]) * wt.x), tf32(widen(rw.b[4 * w + 1][ch]) * wt.y),
                    tf32(widen(rw.b[4 * w + 2][ch]) * wt.z), tf32(widen(rw.b[4 * w + 3][ch]) * wt.w));
                *reinterpret_cast<uint4*>(wb_v + off) = xv;
                *reinterpret_cast<uint4*>(wb_b + off) = xb;
            }
            fence_async_shared();  // the products read them through the async proxy
        }
        unsigned ak[ST / 8][4], akk[ST / 8][4];  // this stage's A fragments, kept until its products are done
#pragma unroll
        for (int kb = 0; kb < ST / 8; ++kb) {
            const int ta = 8 * kb + tq, tb = ta + 4, s0 = 64 * wg + 16 * wi + gq;
            const float a[4] = {widen_k(rw.k[ta][s0]), widen_k(rw.k[ta][s0 + 8]), widen_k(rw.k[tb][s0]),
                                widen_k(rw.k[tb][s0 + 8])};
#pragma unroll
            for (int e = 0; e < 4; ++e) { ak[kb][e] = key_tf32(a[e]); akk[kb][e] = tf32(a[e] * a[e]); }
        }
        __syncthreads();  // the B operands written
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < ST / 8; ++kb) {
            wgmma_tf32(M, ak[kb], operand(wbv + 32 * kb));  // a k-step's 8 tokens: 32 bytes along each row
            wgmma_tf32(J, akk[kb], operand(wbb + 32 * kb));
        }
        wgmma_commit();
        wgmma_wait_all();
        hold(M);
        hold(J);
    }

    // the next chunk's slot: [P, N] rows of M and of J (the carry adds the prior to J); accumulator 4 j + e holds
    // state 16 wi + gq + 8 (e >> 1) of the warpgroup's 64 and channel 8 j + 2 tq + (e & 1)
    const size_t base = ((size_t)(boc + c + 1) * H + h) * P * N + (size_t)(cb * CW) * N;
#pragma unroll
    for (int j = 0; j < CW / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int state = 64 * wg + 16 * wi + gq + 8 * (e >> 1), ch = 8 * j + 2 * tq + (e & 1);
            ck_m[base + (size_t)ch * N + state] = M[4 * j + e];
            ck_i[base + (size_t)ch * N + state] = J[4 * j + e];
        }
#else
    // warp w: state tiles 2 mp, 2 mp + 1 (16 states each) and channel tiles 4 nh .. 4 nh + 3 (8 channels each);
    // lane (gq, tq) holds rows gq, gq + 8 and columns 2 tq, 2 tq + 1 of each 16 x 8 accumulator
    const int mp = w >> 1, nh = w & 1;
    float M[2][4][4], J[2][4][4];
#pragma unroll
    for (int mm = 0; mm < 2; ++mm)
#pragma unroll
        for (int nn = 0; nn < 4; ++nn)
#pragma unroll
            for (int e = 0; e < 4; ++e) { M[mm][nn][e] = 0.f; J[mm][nn][e] = 0.f; }
    constexpr int NST = CT / ST;
    for (int s = 0; s < NST; ++s) {
        if (s + 1 < NST) {
            copy_in(s + 1);
            wait_copies_but_one();
        } else {
            wait_copies();
        }
        __syncthreads();  // stage s landed (and, the first time, the weights written)
        const Raw& rw = sh.raw[s & 1];
#pragma unroll
        for (int kb = 0; kb < ST / 8; ++kb) {
            const int ta = 8 * kb + tq, tb = ta + 4;  // the lane's tokens of this k-step
            float4 ak[2], akk[2];
#pragma unroll
            for (int mm = 0; mm < 2; ++mm) {
                const int s0 = 16 * (2 * mp + mm) + gq;
                const float a0 = widen_k(rw.k[ta][s0]), a1 = widen_k(rw.k[ta][s0 + 8]);
                const float a2 = widen_k(rw.k[tb][s0]), a3 = widen_k(rw.k[tb][s0 + 8]);
                ak[mm] = make_float4(__uint_as_float(tf32(a0)), __uint_as_float(tf32(a1)),
                                     __uint_as_float(tf32(a2)), __uint_as_float(tf32(a3)));
                akk[mm] = make_float4(__uint_as_float(tf32(a0 * a0)), __uint_as_float(tf32(a1 * a1)),
                                      __uint_as_float(tf32(a2 * a2)), __uint_as_float(tf32(a3 * a3)));
            }
            const float wa = sh.w[s * ST + ta], wb = sh.w[s * ST + tb];
#pragma unroll
            for (int nn = 0; nn < 4; ++nn) {
                const int ch = 8 * (4 * nh + nn) + gq;
                const unsigned v0 = tf32(widen(rw.v[ta][ch]) * wa), v1 = tf32(widen(rw.v[tb][ch]) * wb);
                const unsigned b0 = tf32(widen(rw.b[ta][ch]) * wa), b1 = tf32(widen(rw.b[tb][ch]) * wb);
#pragma unroll
                for (int mm = 0; mm < 2; ++mm) {
                    mma(M[mm][nn], ak[mm], v0, v1);
                    mma(J[mm][nn], akk[mm], b0, b1);
                }
            }
        }
        __syncthreads();  // every warp done with raw[s & 1] before stage s + 2's copies go there
    }

    // the next chunk's slot: [P, N] rows of M and of J (the carry adds the prior to J)
    const size_t base = ((size_t)(boc + c + 1) * H + h) * P * N + (size_t)(cb * CW) * N;
#pragma unroll
    for (int mm = 0; mm < 2; ++mm)
#pragma unroll
        for (int nn = 0; nn < 4; ++nn)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int state = 16 * (2 * mp + mm) + gq + 8 * (e >> 1), ch = 8 * (4 * nh + nn) + 2 * tq + (e & 1);
                ck_m[base + (size_t)ch * N + state] = M[mm][nn][e];
                ck_i[base + (size_t)ch * N + state] = J[mm][nn][e];
            }
#endif
}
"""


def layout_options() -> list[str]:
    """The layout's constants as the source's macros, so that the module and the kernel share one definition."""
    return [f"-DN={STATES}", f"-DCW={CHANNELS}", f"-DTHREADS={THREADS}", f"-DST={STAGE}", f"-DPAD={PAD}"]


def shared_bytes(dtype: torch.dtype = torch.bfloat16, key_dtype: torch.dtype | None = None, chunk: int = 512,
                 wgmma: bool = False) -> int:
    """The dynamic shared memory of a CTA (the source's ``SHARED_BYTES``): two stages of keys, values and gains as
    copied, in padded rows; a weight a token of the chunk; a sum a warp; under ``wgmma`` a stage's two B operands (64
    rows of 128 bytes each) and the slack that aligns them to 1024 bytes."""
    key_dtype = key_dtype or dtype
    stage = STAGE * ((STATES + PAD) * key_dtype.itemsize + 2 * (CHANNELS + PAD) * dtype.itemsize)
    size = 2 * stage + 4 * chunk + 4 * (THREADS // 32)
    return size + 1023 + 2 * CHANNELS * 4 * STAGE if wgmma else size


def uses_wgmma(arch: str, wgmma: bool | None = None) -> bool:
    """Whether the kernel built for ``arch`` takes the warpgroup products: ``wgmma`` where given, else ``WGMMA`` on
    sm_90a (the only target that has them)."""
    return (WGMMA if wgmma is None else wgmma) and arch == "sm_90a"


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  arch: str = "sm_90a", key_dtype: torch.dtype | None = None, wgmma: bool | None = None) -> bytes:
    """The kernel compiled for ``arch`` (a CPU is enough): the cubin's bytes; ``wgmma`` as :func:`uses_wgmma`."""
    wgmma = uses_wgmma(arch, wgmma)
    options = [f"--gpu-architecture={arch}", "-std=c++17", *layout_options(), *dtype_options(dtype, key_dtype),
               f"-DH={heads}", f"-DG={groups}", f"-DP={head_dim}", f"-DCT={chunk}", f"-DVARLEN={int(varlen)}",
               f"-DWGMMA={int(wgmma)}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_fwd_local.cu", options, "the forward's local pass")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, key_dtype: torch.dtype, heads: int, groups: int, head_dim: int,
            chunk: int, varlen: bool, wgmma: bool):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, arch=cuda_build.arch(device),
                          key_dtype=key_dtype, wgmma=wgmma)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes(dtype, key_dtype, chunk, wgmma))


def mode(config: dict) -> str:
    """``config["local_CUDA"]``, else ``PALIMPSA_CUDA_FWD_LOCAL``, else ``DEFAULT``, as one of ``auto``, ``on``,
    ``off`` (None counts as unset)."""
    return cuda_build.switch(config, "local_CUDA", ENV, DEFAULT)


def unsupported(v: torch.Tensor, k: torch.Tensor, beta, chunk_size: int, n_states: int = 1) -> str | None:
    """Why this kernel cannot take these inputs (None where it can)."""
    reason = cuda_build.tensor_core_reason(v, k, beta, STATES, CHANNELS, "its products")
    if reason is not None:
        return reason
    if n_states > MAX_SEQUENCES:
        return f"{n_states} sequences (at most {MAX_SEQUENCES}, a grid dimension)"
    if chunk_size % THREADS or chunk_size % STAGE:
        return f"chunk size {chunk_size} (a multiple of {THREADS})"
    if torch.cuda.get_device_capability(v.device)[0] < 8:
        return "compute capability below 8.0 (cp.async, TF32 products)"
    if nvrtc() is None:
        return "no libnvrtc"
    return None


def wanted(v: torch.Tensor, k: torch.Tensor, beta, chunk_size: int, config: dict, named=(),
           n_states: int = 1) -> bool:
    """Whether the chunked forward's local pass runs this kernel (``config`` the chunked forward's, ``named`` the keys
    its caller set): :func:`mode` ``on`` wherever it can run (else an error saying why, and an error where the caller
    named a key of the Triton kernel's, ``TRITON_KEYS``, which this kernel would ignore), ``auto`` where it can run on
    compute capability 9.x unless the caller named such a key or its compile or load failed in this process
    (``FAILED``), ``off`` never."""
    chosen = mode(config)
    if chosen == "off":
        return False
    triton_keys = sorted(key for key in named if key in TRITON_KEYS)
    if chosen == "on" and triton_keys:
        raise ValueError(f"local_CUDA / {ENV} = 1 asks for the CUDA local pass, which ignores the Triton kernel's keys "
                         f"{', '.join(triton_keys)}: drop them, or set local_CUDA to 0 for the Triton kernel")
    reason = unsupported(v, k, beta, chunk_size, n_states)
    if chosen == "on" and reason is not None:
        raise ValueError(f"the CUDA local pass of the chunked forward cannot run here ({reason}); "
                         f"set {ENV}=auto or 0 (or local_CUDA) for the Triton kernel where it cannot")
    return reason is None and (chosen == "on" or (not triton_keys and FAILED is None
                                                  and torch.cuda.get_device_capability(v.device)[0] == 9))


def local(v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, n_chunks, n_states, max_chunks, chunk_size):
    """Every chunk's end state from a zero start (a sequence's last chunk has none) into the next chunk's slot of
    ``ck_m`` (``M``) and ``ck_i`` (``J``), as ``chunked_fwd.palimpsa_fwd_local_kernel`` writes them."""
    if n_states == 0:  # an empty batch: no chunk (an empty grid is a launch error)
        return
    batch, length, heads, head_dim = v.shape
    groups = k.shape[2]
    varlen = cu_seqlens is not None
    device = v.device.index if v.device.index is not None else torch.cuda.current_device()
    wgmma = uses_wgmma(cuda_build.arch(device))
    func = _kernel(device, v.dtype, k.dtype, heads, groups, head_dim, chunk_size, varlen, wgmma)
    v, beta, k = (cuda_build.aligned(t) for t in (v, beta, k))
    log_decay = log_decay.float().contiguous()
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, log_decay, beta, ck_m, ck_i, cu_seqlens.to(torch.int32) if varlen else empty,
               offsets.to(torch.int32) if varlen else empty]
    cuda_build.launch(func, v.device, (max_chunks, heads * (head_dim // CHANNELS), n_states), THREADS,
                      shared_bytes(v.dtype, k.dtype, chunk_size, wgmma), tensors,
                      [length, n_chunks // max(1, n_states) if not varlen else 0])
