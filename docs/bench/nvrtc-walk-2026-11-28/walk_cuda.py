"""The chunk-parallel forward's chunk walk written in CUDA C++ and compiled at run time by NVRTC (issue 14's last
route), beside the Triton walk that ships: the same chunk checkpoints in, the same ``y`` out.

Mapping (docs/bench/nvrtc-walk-2026-11-28/README.md): a CTA walks one (sequence, head, chunk) with ``P / 8`` warps,
a warp 8 channels; a lane holds 2 channels x 16 states (states ``32 j + 4 (lane % 8) + u``, so that the lanes with
the same states read the same 16 bytes, a broadcast), in rescaled states as the Triton walk (``M' = e M``,
``J' = e (I - I_prior)``, renormalised past ``|s| > 20``). Each block of ``BT`` tokens' inputs is copied to shared
memory by ``cp.async`` a block ahead (keys, squared keys and queries as float32 rows, shared by the CTA's warps;
values, gains, log decays); a token's readout is summed over the 8 lanes of a channel pair by one reduce-scatter
stage and two full ones. The scale goes on the channel side (``v e``, ``beta e``: 4 multiplies a lane and token),
with the squared keys computed once per call beside the float32 copies the Triton walk makes anyway.

Modes:
  ``--sass``   compile for sm_90a on this machine (a CPU is enough: NVRTC from the ``nvidia-cuda-nvrtc-cu12``
               wheel, ``PALIMPSA_NVRTC=/path/libnvrtc.so.12``; cuobjdump from Triton's wheel) and count the token
               loop's SASS instructions;
  default      on a GPU: ``y`` against the Triton walk's and a float64 reference, then the forward with each walk
               (local pass and carry shared) timed in interleaved rounds, and the walks alone.
Run from the repository root: ``python3 docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py [--sass]``."""

import argparse
import ctypes
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch

SOURCE = r"""
#define N 128
#define WARPS (CW / 8)
#define THREADS (WARPS * 32)
#define TAU 20.0f
#define LOG2E 1.4426950408889634f

#if VT_BF16
typedef unsigned short vt;
#elif VT_F16
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
template <int n> __device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;\n" :: "n"(n)); }

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
                   vt* __restrict__ y, int T, int n_chunks)
{
    extern __shared__ __align__(16) unsigned char smem[];
    Stage* st = reinterpret_cast<Stage*>(smem);
    const int c = blockIdx.x, h = blockIdx.y / (P / CW), cb = blockIdx.y % (P / CW), b = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, ln = tid & 31, i = ln & 7, cp = ln >> 3;
    const int ig = h / (H / G);
    const int t0 = c * CT;
    const int n_tok = min(CT, T - t0);
    if (n_tok <= 0) return;
    const float ip = *ip_ptr;
    const int ch0 = cb * CW + w * 8 + 2 * cp;  // the lane's first channel in the head

    float M0[16], M1[16], J0[16], J1[16];
    {
        const size_t base = ((size_t)(b * n_chunks + c) * H + h) * P * N + (size_t)ch0 * N + 4 * i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float4 m0 = *(const float4*)(ck_m + base + 32 * j);
            const float4 m1 = *(const float4*)(ck_m + base + N + 32 * j);
            const float4 i0 = *(const float4*)(ck_i + base + 32 * j);
            const float4 i1 = *(const float4*)(ck_i + base + N + 32 * j);
            M0[4 * j] = m0.x; M0[4 * j + 1] = m0.y; M0[4 * j + 2] = m0.z; M0[4 * j + 3] = m0.w;
            M1[4 * j] = m1.x; M1[4 * j + 1] = m1.y; M1[4 * j + 2] = m1.z; M1[4 * j + 3] = m1.w;
            J0[4 * j] = i0.x - ip; J0[4 * j + 1] = i0.y - ip; J0[4 * j + 2] = i0.z - ip; J0[4 * j + 3] = i0.w - ip;
            J1[4 * j] = i1.x - ip; J1[4 * j + 1] = i1.y - ip; J1[4 * j + 2] = i1.z - ip; J1[4 * j + 3] = i1.w - ip;
        }
    }

    // one block of BT tokens' inputs into a stage (tokens past the chunk zero-filled)
    auto issue = [&](int blk, int slot) {
        Stage& s = st[slot];
        const int tb = t0 + blk * BT, end = t0 + n_tok;
        for (int x = tid; x < BT * N / 4; x += THREADS) {
            const int t = x / (N / 4), col = (x % (N / 4)) * 4;
            const bool ok = tb + t < end;
            const size_t row = ((size_t)b * T + (ok ? tb + t : t0)) * G + ig;
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
            const size_t row = ((size_t)b * T + (ok ? tb + t : t0)) * H + h;
            cp16(&s.v[t][col], v + row * P + cb * CW + col, ok);
            cp16(&s.b[t][col], beta + row * P + cb * CW + col, ok);
        }
        if (tid < BT) {
            const bool ok = tb + tid < end;
            cp4(&s.g[tid], g + ((size_t)b * T + (ok ? tb + tid : t0)) * H + h, ok);
        }
        commit();
    };

    const int n_blk = (n_tok + BT - 1) / BT;
    const bool hi = (ln >> 2) & 1, odd = (ln >> 1) & 1;
    vt* yp = y + ((size_t)b * T + t0) * H * P + (size_t)h * P + cb * CW + w * 8 + (ln >> 2);
    float s = 0.f;

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
                if (j < PAIRRCP) {
                    // one reciprocal for the two channels' denominators: 1 / D0 = D1 / (D0 D1), and the query
                    // folded into it (D = e I <= e^TAU I, so the product stays far from float32's range ends)
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
    // the scale of the next token: renormalise first where |s| would pass TAU (the states times the decay since
    // the last renormalisation, this token's included)
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

    issue(0, 0);
    for (int blk = 0; blk < n_blk; ++blk) {
        wait_copies<0>();
        __syncthreads();  // every copy of this block landed, every warp done with the block before
        if (blk + 1 < n_blk) issue(blk + 1, (blk + 1) & 1);
        const Stage& S = st[blk & 1];
        const float* kp = &S.k[0][4 * i];
#if KKC
        const float* kkp = nullptr;  // (squared here)
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
        // two tokens an iteration: their four sums (2 tokens x 2 channels) over the 8 lanes in one butterfly,
        // two reduce-scatter stages (channel, then token) and a full one
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
}
"""

KERNEL = "palimpsa_walk_cuda"


def _nvrtc() -> ctypes.CDLL:
    """libnvrtc: ``PALIMPSA_NVRTC``, else the one torch's CUDA build loads, else the ``nvidia-cuda-nvrtc`` wheel's."""
    names = [os.environ.get("PALIMPSA_NVRTC", "")]
    major = (torch.version.cuda or "12").split(".")[0]
    names.append(f"libnvrtc.so.{major}")
    for path in sys.path:
        names += sorted(glob.glob(os.path.join(path, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.*")))
        names += sorted(glob.glob(os.path.join(path, "nvidia", "cu*", "lib", "libnvrtc.so.*")))
    for name in names:
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    raise OSError("no libnvrtc found: pip install nvidia-cuda-nvrtc-cu12, or set PALIMPSA_NVRTC")


def stage_bytes(dtype: torch.dtype, channels: int, block: int, square_keys: int = 0) -> int:
    """Two stages of ``block`` tokens: keys, squared keys (unless squared in the walk) and queries (128 float32
    each), the CTA's ``channels`` of values and gains, decays."""
    return 2 * block * ((3 - square_keys) * 128 * 4 + 2 * channels * (4 if dtype == torch.float32 else 2) + 4)


def compile_cubin(dtype: torch.dtype, heads: int, groups: int, head_dim: int, chunk: int, block: int = 8,
                  min_blocks: int = 2, arch: str = "sm_90a", extra=(), pairs: int = 1, channels: int = 0,
                  pair_rcp: int = 0, square_keys: int = 0) -> bytes:
    lib = _nvrtc()
    flag = {torch.bfloat16: "VT_BF16", torch.float16: "VT_F16"}.get(dtype, "VT_F32")
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "--use_fast_math", f"-D{flag}=1", f"-DH={heads}",
            f"-DG={groups}", f"-DP={head_dim}", f"-DCT={chunk}", f"-DBT={block}", f"-DMINB={min_blocks}",
            f"-DPAIRS={pairs}", f"-DCW={channels or head_dim}", f"-DPAIRRCP={pair_rcp}", f"-DKKC={square_keys}",
            *extra]
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), SOURCE.encode(), b"walk.cu", 0, None, None) == 0
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    res = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if res != 0:
        raise RuntimeError("NVRTC failed:\n" + log.value.decode())
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    assert lib.nvrtcGetCUBIN(prog, cubin) == 0
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw


def sass(cubin: bytes) -> str:
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-sass", "-res-usage", f.name], capture_output=True, text=True, check=True)
    return res.stdout


def token_loop_counts(text: str, tokens: int = 1) -> dict:
    """The innermost backward branch's loop (the token loop): its instructions on the path without the
    renormalisation (forward branches skipped over), by opcode."""
    ins = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(3), m.group(4)))
    addr = {a: n for n, (a, _, _) in enumerate(ins)}
    loops = []
    for n, (a, op, args) in enumerate(ins):
        t = re.search(r"0x([0-9a-f]+)", args)
        if op.startswith("BRA") and t and int(t.group(1), 16) < a and int(t.group(1), 16) in addr:
            loops.append((addr[int(t.group(1), 16)], n))
    # the token loop: the innermost loop with the work of ``tokens`` tokens (over 96 FFMAs a lane and token)
    start, end = max(loops, key=lambda x: (
        sum(ins[n][1].startswith("FFMA") for n in range(x[0], x[1] + 1)) >= 96 * tokens, x[0] - x[1]))
    counts, n = {}, start
    while n <= end:
        a, op, args = ins[n]
        counts[op.split(".")[0]] = counts.get(op.split(".")[0], 0) + 1
        t = re.search(r"0x([0-9a-f]+)", args)
        if op.startswith("BRA") and t and int(t.group(1), 16) > a and n != end:
            n = addr[int(t.group(1), 16)]  # a forward branch: the renormalisation skipped
            continue
        n += 1
    return counts


class CudaWalk:
    """The compiled walk for one dtype and shape, loaded through the driver API (ctypes) into the context torch made
    current, and launched on torch's current stream."""

    def __init__(self, dtype, heads, groups, head_dim, chunk, block=8, min_blocks=2, pairs=1, channels=0,
                 pair_rcp=0, square_keys=0):
        torch.cuda.init()
        torch.cuda.current_stream().synchronize()  # (the primary context current on this thread)
        major, minor = torch.cuda.get_device_capability()
        cubin = compile_cubin(dtype, heads, groups, head_dim, chunk, block, min_blocks, f"sm_{major}{minor}a",
                              pairs=pairs, channels=channels, pair_rcp=pair_rcp, square_keys=square_keys)
        self.channels = channels or head_dim
        self.smem = stage_bytes(dtype, self.channels, block, square_keys)
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.module, self.func = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(self.func), self.module, KERNEL.encode()),
                    "cuModuleGetFunction")
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check(self.cuda.cuFuncSetAttribute(self.func, 8, self.smem), "cuFuncSetAttribute")
        self.poison = False

    def _check(self, code, what):
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA error {code}")

    def __call__(self, v, k32, kk32, q32, log_decay, beta, ck_m, ck_i, ip, n_chunks, chunks):
        batch, length, heads, head_dim = v.shape
        y = torch.full_like(v, float("nan")) if self.poison else torch.empty_like(v)
        ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (v, k32, kk32, q32, log_decay, beta, ck_m, ck_i, ip, y)]
        ints = [ctypes.c_int(length), ctypes.c_int(n_chunks)]
        args = (ctypes.c_void_p * 12)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in ptrs + ints])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self.cuda.cuLaunchKernel(self.func, chunks, heads * (head_dim // self.channels), batch,
                                             self.channels // 8 * 32, 1, 1, self.smem,
                                             stream, args, None), "cuLaunchKernel")
        return y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", action="store_true", help="compile for sm_90a here and count the token loop")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="one forward with each walk at the first shape, bf16, nothing checked or timed (for ncu)")
    parser.add_argument("--shapes", default="1x8192,4x8192")
    parser.add_argument("--variants", default="bt16=16:2:1:64,pr2=16:2:1:64:2,pr4=16:2:1:64:4,kkc=16:2:1:64:0:1,"
                                              "pr2kkc=16:2:1:64:2:1",
                        help="NAME=BT:MINB:PAIRS:CW[:PAIRRCP[:KKC]],... (tokens a shared-memory stage, CTAs an SM the "
                             "registers are capped for, two tokens an iteration, channels a CTA, groups of 4 states "
                             "whose two channels share a reciprocal (0-4), keys squared in the walk)")
    args = parser.parse_args()
    if args.sass:
        for dtype, pairs in ((torch.bfloat16, 1), (torch.float32, 1), (torch.bfloat16, 0)):
            text = sass(compile_cubin(dtype, 80, 1, 64, 512, pairs=pairs))
            regs = re.findall(r"REG:(\d+)", text)
            tokens = 1 + pairs
            counts = token_loop_counts(text, tokens)
            total = sum(counts.values())
            print(f"{dtype}, {tokens} token(s) an iteration: registers {regs}, token loop {total / tokens:.1f} "
                  f"instructions a token and lane ({total / tokens / 32:.2f} an element-token): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda x: -x[1])))
        return
    run_gpu(args)


def run_gpu(args):
    # the chunked forward's own CUDA walk (kernels/cuda_walk.py, taken by `auto` since call 4) off, so that "triton"
    # is the Triton walk and each variant the prototype's kernel patched in below
    os.environ["PALIMPSA_CUDA_WALK"] = "0"
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
    import bench_scan
    from palimpsa.kernels import chunked_fwd
    from palimpsa.kernels import fused_recurrent as fr
    from triton.testing import do_bench

    walks = {}
    real_walk = fr._walk
    variants = {}
    for item in args.variants.split(","):
        name, _, spec = item.partition("=")
        variants[name] = tuple(int(x) for x in spec.split(":"))
    current = {"variant": next(iter(variants))}

    def cuda_walk(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, offsets, n_chunks, ck_m, ck_i,
                  output_final_state, output_uncertainty, store_checkpoints, fwd_config, chunk_size, chunks=None):
        assert chunks is not None and cu_seqlens is None and m0 is None and not output_final_state
        assert not output_uncertainty and beta is not None
        key = (v.dtype, v.shape[2], k.shape[2], v.shape[3], chunk_size, *variants[current["variant"]])
        if key not in walks:
            walks[key] = CudaWalk(*key)
        k32, q32 = k.float(), q.float()
        ip = fr._prior_tensor(importance_prior, torch.float32, v.device)
        walks[key].poison = fr.POISON_OUTPUTS
        y = walks[key](v, k32, k32 * k32, q32, log_decay, beta, ck_m, ck_i, ip, n_chunks // v.shape[0], chunks)
        return y, None, None, None

    def forward(inputs, variant):
        use_cuda = variant != "triton"
        current["variant"] = variant if use_cuda else current["variant"]
        chunked_fwd.fr._walk = cuda_walk if use_cuda else real_walk
        try:
            with torch.no_grad():
                return fr.fused_recurrent_palimpsa_scan(
                    inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 1.0, None, False,
                    False, fwd_config={"kernel": "chunked"}, bwd_config=None)[0]
        finally:
            chunked_fwd.fr._walk = real_walk

    if args.profile:
        batch, length = (int(x) for x in args.shapes.split(",")[0].split("x"))
        inputs = bench_scan.scan_inputs(batch, length)
        for name in ["triton", *variants]:
            forward(inputs, name)
        torch.cuda.synchronize()
        return
    print("machine:", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    # correctness: against the Triton walk and a float64 reference (naive), bf16 and float32, fast decays too
    from palimpsa.kernels import naive
    for dtype in (torch.bfloat16, torch.float32):
        for (batch, length, fast) in ((1, 1024, False), (2, 1001, True), (1, 8192, False)):
            bench_scan.OURS_DTYPE = dtype
            inputs = bench_scan.scan_inputs(batch, length, seed=batch * 7 + length + fast)
            if fast:  # decays down to e^-10 a token: renormalised at most tokens
                inputs["log_decay"] = -10 * torch.rand_like(inputs["log_decay"])
            want = forward(inputs, "triton").double()
            ref = None
            if length <= 1024:
                ref = naive.naive_palimpsa_scan(*(inputs[n].double() for n in ("v", "k", "q", "log_decay", "beta")),
                                                1.0, None)[0]
            for name in variants:
                fr.POISON_OUTPUTS = True  # (our y comes from torch.empty_like: NaN-filled below instead)
                got = forward(inputs, name).double()
                line = (f"{str(dtype):>15} B={batch} L={length} fast={fast} {name}: cuda vs triton "
                        f"{((got - want).norm() / want.norm()).item():.2e}")
                if ref is not None:
                    line += (f", cuda vs float64 {((got - ref).norm() / ref.norm()).item():.2e}, triton vs float64 "
                             f"{((want - ref).norm() / ref.norm()).item():.2e}")
                line += f", finite {bool(torch.isfinite(got).all())}"
                print(line, flush=True)
            fr.POISON_OUTPUTS = False
    # timing: the whole forward with each walk, interleaved rounds; then the walks alone on one set of checkpoints
    for dtype in (torch.bfloat16, torch.float32):
        bench_scan.OURS_DTYPE = dtype
        if dtype == torch.float32:
            torch.set_float32_matmul_precision("high")
        for shape in args.shapes.split(","):
            batch, length = (int(x) for x in shape.split("x"))
            inputs = bench_scan.scan_inputs(batch, length)
            names = ["triton", *variants]
            times = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    times[name].append(do_bench(lambda n=name, x=inputs: forward(x, n), warmup=25, rep=200,
                                                return_mode="median"))
            tri = statistics.median(times["triton"])
            for name in names:
                med = statistics.median(times[name])
                print(f"{str(dtype):>15} B={batch} L={length} forward with the {name:>6} walk: {med:.3f} ms "
                      f"({med / tri:.3f}x triton's; rounds {min(times[name]):.3f}-{max(times[name]):.3f})",
                      flush=True)
    torch.set_float32_matmul_precision("highest")


if __name__ == "__main__":
    main()
