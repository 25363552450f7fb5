"""The chunk-parallel forward's local pass in CUDA C++, compiled at run time by NVRTC, its products on tensor cores
(docs/kernels.md, "The local pass in CUDA C++ (forward; ...)").

``chunked_fwd.py``'s first launch gives every chunk but a sequence's last its end state from a zero start,
``sum_t w_t v_t (x) k_t`` and ``sum_t w_t beta_t (x) k_t^2`` (``w_t`` the exponential of the chunk's log decays
after token ``t``), into the next chunk's checkpoint slot; its Triton kernel takes 0.235 ms at B = 1, L = 8192 on an
H200 (0.887 at B = 4), 3-4x its bytes and products. This kernel does the same sums with the mapping chosen by hand:

* a CTA of 8 warps takes one (sequence, head, chunk, block of 64 channels); warp ``w`` the 32 states ``32 (w >> 1)
  ..`` and the 32 channels ``32 (w & 1) ..``: 2 x 4 accumulators of ``mma.m16n8k8`` for ``M`` and for ``J``, states
  as rows and channels as columns, so each A fragment (keys, squared keys: 16 states x 8 tokens) serves 4 products
  and each B fragment (weighted values, gains: 8 tokens x 8 channels) 2;
* the chunk's weights first: each thread sums the log decays of its tokens, the warp and the CTA add the sums of the
  tokens after them (a sum over exactly the tokens after each, never a difference), one exponential a token;
* stages of 32 tokens (keys, values, gains as they come) copied by ``cp.async`` a stage ahead into rows padded so
  that the 4 token rows a fragment reads fall in different banks; every warp builds its own fragments from them
  (16-bit keys are TF32 exactly; squared keys, float32 keys and the weighted values and gains are rounded to TF32, as
  the Triton kernel's ``tl.dot`` rounds them);
* the end states written as ``M`` and ``J = I - I_prior`` into the next chunk's slot, which the carry turns into the
  checkpoint.

Not yet run on a GPU: it compiles for sm_90a on the CPU (``tests/kernels/test_cuda_fwd_local.py``), and is taken only
where asked for (``fwd_config`` key ``local_CUDA`` 1 or auto, or ``PALIMPSA_CUDA_FWD_LOCAL``) until the GPU checks
and timings say it may be the default (``DEFAULT``).
"""

import functools

import torch

from . import cuda_build
from .cuda_build import dtype_options, nvrtc

# 1: the chunked forward's local pass in this kernel wherever it can run (else an error); auto: where it can run on
# compute capability 9.x, Triton's elsewhere; 0: Triton's. DEFAULT is what an unset key and variable mean: 0 until
# the kernel has run on a GPU against float64
ENV = "PALIMPSA_CUDA_FWD_LOCAL"
DEFAULT = "0"
STATES = 128  # the state size the kernel is written for
CHANNELS = 64  # a CTA's channels
THREADS = 256  # 8 warps: a warp 32 states x 32 channels
STAGE = 32  # tokens a shared-memory stage (4 tensor-core k-steps)
PAD = 8  # elements a staged row is padded by (bank conflicts)
KERNEL = "palimpsa_fwd_local_cuda"
MAX_SEQUENCES = 65535  # the grid's third dimension: one a sequence
# the Triton kernel's keys, which this kernel has no use for: a config that names them asks for the Triton kernel
TRITON_KEYS = ("BP", "BK", "BT", "DOT", "local_warps", "SUFFIX")
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

extern "C" __global__ void __launch_bounds__(THREADS, 2)
palimpsa_fwd_local_cuda(const vt* __restrict__ v, const kt* __restrict__ k, const float* __restrict__ g,
                        const vt* __restrict__ beta, float* __restrict__ ck_m, float* __restrict__ ck_i,
                        const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets, int T,
                        int n_chunks)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
    const int c = blockIdx.x, h = blockIdx.y / (P / CW), cb = blockIdx.y % (P / CW), sq = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31, gq = ln >> 2, tq = ln & 3;
    const int ig = h / (H / G);
    const Bounds sb = bounds(sq, cu_seqlens, chunk_offsets, T, n_chunks);
    const long long bos = sb.bos, boc = sb.boc;
    const int t0 = c * CT;
    if (t0 + CT >= sb.len) return;  // a sequence's last chunk (no checkpoint after it), or past its end
    const long long tc = bos + t0;  // the chunk's first token: every chunk taken here is whole

    auto copy_in = [&](int s) {  // stage s's tokens into raw[s & 1]
        Raw& rw = sh.raw[s & 1];
        const long long t1 = tc + (long long)s * ST;
#pragma unroll
        for (int f = tid; f < ST * N / KPC; f += THREADS) {
            const int t = f / (N / KPC), col = (f % (N / KPC)) * KPC;
            cp16(&rw.k[t][col], k + ((size_t)(t1 + t) * G + ig) * N + col, true);
        }
#pragma unroll
        for (int f = tid; f < ST * CW / VPC; f += THREADS) {
            const int t = f / (CW / VPC), col = (f % (CW / VPC)) * VPC;
            const size_t row = ((size_t)(t1 + t) * H + h) * P + cb * CW + col;
            cp16(&rw.v[t][col], v + row, true);
            cp16(&rw.b[t][col], beta + row, true);
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
}
"""


def layout_options() -> list[str]:
    """The layout's constants as the source's macros, so that the module and the kernel share one definition."""
    return [f"-DN={STATES}", f"-DCW={CHANNELS}", f"-DTHREADS={THREADS}", f"-DST={STAGE}", f"-DPAD={PAD}"]


def shared_bytes(dtype: torch.dtype = torch.bfloat16, key_dtype: torch.dtype | None = None, chunk: int = 512) -> int:
    """The dynamic shared memory of a CTA (the source's ``sizeof(Shared)``): two stages of keys, values and gains as
    copied, in padded rows; a weight a token of the chunk; a sum a warp."""
    key_dtype = key_dtype or dtype
    stage = STAGE * ((STATES + PAD) * key_dtype.itemsize + 2 * (CHANNELS + PAD) * dtype.itemsize)
    return 2 * stage + 4 * chunk + 4 * (THREADS // 32)


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, *, varlen: bool = False,
                  arch: str = "sm_90a", key_dtype: torch.dtype | None = None) -> bytes:
    """The kernel compiled for ``arch`` (a CPU is enough): the cubin's bytes."""
    options = [f"--gpu-architecture={arch}", "-std=c++17", *layout_options(), *dtype_options(dtype, key_dtype),
               f"-DH={heads}", f"-DG={groups}", f"-DP={head_dim}", f"-DCT={chunk}", f"-DVARLEN={int(varlen)}"]
    return cuda_build.compile_source(SOURCE, "palimpsa_fwd_local.cu", options, "the forward's local pass")


@functools.lru_cache(maxsize=32)
def _kernel(device: int, dtype: torch.dtype, key_dtype: torch.dtype, heads: int, groups: int, head_dim: int,
            chunk: int, varlen: bool):
    cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, varlen=varlen, arch=cuda_build.arch(device),
                          key_dtype=key_dtype)
    return cuda_build.load(device, cubin, KERNEL, shared_bytes(dtype, key_dtype, chunk))


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
    func = _kernel(device, v.dtype, k.dtype, heads, groups, head_dim, chunk_size, varlen)
    v, beta, k = (cuda_build.aligned(t) for t in (v, beta, k))
    log_decay = log_decay.float().contiguous()
    empty = torch.empty((1,), dtype=torch.int32, device=v.device)
    tensors = [v, k, log_decay, beta, ck_m, ck_i, cu_seqlens.to(torch.int32) if varlen else empty,
               offsets.to(torch.int32) if varlen else empty]
    cuda_build.launch(func, v.device, (max_chunks, heads * (head_dim // CHANNELS), n_states), THREADS,
                      shared_bytes(v.dtype, k.dtype, chunk_size), tensors,
                      [length, n_chunks // max(1, n_states) if not varlen else 0])
