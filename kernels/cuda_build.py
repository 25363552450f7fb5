"""Compiling CUDA C++ at run time with NVRTC and launching it on PyTorch's stream, through ``ctypes`` only.

The CUDA chunk walk (``cuda_walk.py``) and the CUDA local pass of the backward (``cuda_local.py``) use it. NVRTC
comes with PyTorch's CUDA wheels (``nvidia-cuda-nvrtc``), and the driver API with the NVIDIA driver, so nothing
beyond PyTorch is installed. A CPU machine with the NVRTC wheel compiles (``compile_source``) but cannot load or
launch.
"""

import ctypes
import functools
import glob
import os
import sys

import torch

_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

# device helpers both kernels' sources start with: fast reciprocal and exponential (flushing subnormals), the
# asynchronous copies to shared memory (16 or 4 bytes, zero-filled where ``ok`` is false), and a sequence's bounds
HELPERS = r"""
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

// a sequence's first token, first checkpoint and length (packed sequences under VARLEN)
struct Bounds { long long bos, boc; int len; };
__device__ __forceinline__ Bounds bounds(int sq, const int* cu_seqlens, const int* chunk_offsets, int T, int n_chunks) {
#if VARLEN
    return {cu_seqlens[sq], chunk_offsets[sq], cu_seqlens[sq + 1] - cu_seqlens[sq]};
#else
    return {(long long)sq * T, (long long)sq * n_chunks, T};
#endif
}
"""

# what the tensor-core kernels (cuda_local.py, cuda_correct.py) add to HELPERS: the element types their dtype macros
# choose (VT_* values and gains, KT_* keys; the -D options of dtype_options), widening to float32, TF32
# rounding, the TF32 product m16n8k8 and the global reductions (one float, or four at once)
TENSOR_CORE_HELPERS = r"""
#if VT_F32                      // values, gains (and their gradients)
typedef float vt;
#else
typedef unsigned short vt;
#endif
#if KT_F32                      // keys (and queries)
typedef float kt;
#else
typedef unsigned short kt;
#endif
#define VPC (16 / (int)sizeof(vt))  // elements a 16-byte copy
#define KPC (16 / (int)sizeof(kt))
#ifndef FIXCP
#define FIXCP 1                 // the backward kernels' copies: 1 in loops of known trip count, 0 the general loop
#endif
// PIECES(f, n) { ... }: the thread's pieces f of n (tid, tid + THREADS, ...), in a loop whose trip count the
// compiler knows under FIXCP (a guard where n is no multiple of THREADS)
#if FIXCP
#define PIECES(f, n) for (int i_##f = 0, f = tid; i_##f < ((n) + THREADS - 1) / THREADS; ++i_##f, f += THREADS) \
                         if ((n) % THREADS == 0 || f < (n))
#else
#define PIECES(f, n) for (int f = tid; f < (n); f += THREADS)
#endif

__device__ __forceinline__ void red_add(float* p, float x) {
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(x) : "memory");
}
__device__ __forceinline__ void red_add4(float* p, float x, float y, float z, float w) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r;
}
// c += a b (mma.m16n8k8, TF32 operands): a a 16 x 8 A fragment, b0, b1 an 8 x 8 B fragment, c the 16 x 8 accumulator
__device__ __forceinline__ void mma(float (&c)[4], const float4& a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(__float_as_uint(a.x)), "r"(__float_as_uint(a.y)), "r"(__float_as_uint(a.z)), "r"(__float_as_uint(a.w)),
          "r"(b0), "r"(b1));
}
// an input as float32: float32 as it is, 16 bits as bf16 or fp16
__device__ __forceinline__ float as_f32(float x, bool) { return x; }
__device__ __forceinline__ float as_f32(unsigned short x, bool bf16) {
    if (bf16) return __uint_as_float((unsigned)x << 16);
    float r; asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x)); return r;
}
__device__ __forceinline__ float widen(vt x) { return as_f32(x, VT_BF16); }
__device__ __forceinline__ float widen_k(kt x) { return as_f32(x, KT_BF16); }
"""

def dtype_options(dtype: torch.dtype, key_dtype: torch.dtype | None = None) -> list:
    """``TENSOR_CORE_HELPERS``' dtype macros: each of ``VT_BF16``, ``VT_F16``, ``VT_F32`` (values, gains and their
    gradients) and ``KT_*`` (keys and queries, ``dtype``'s by default) defined, 1 for the chosen dtypes, 0 for the
    others."""
    names = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
    return [f"-D{side}_{name}={int(kind == chosen)}" for side, chosen in (("VT", dtype), ("KT", key_dtype or dtype))
            for kind, name in names.items()]

def tf32_dtype_reason(v: torch.Tensor, k: torch.Tensor, products: str) -> str | None:
    """Why a tensor-core kernel (whose ``products`` run in TF32) cannot take values ``v`` and keys ``k`` of these
    dtypes: bf16, fp16, or float32 where PyTorch allows TF32 (``torch.get_float32_matmul_precision()`` not
    "highest"); None where it can."""
    kinds = (torch.bfloat16, torch.float16, torch.float32)
    if v.dtype not in kinds or k.dtype not in kinds:
        return f"{v.dtype} values or {k.dtype} keys (bf16, fp16, or float32 with TF32 allowed)"
    if torch.float32 in (v.dtype, k.dtype) and torch.get_float32_matmul_precision() == "highest":
        return (f"float32 inputs at full precision ({products} run in TF32: "
                "torch.set_float32_matmul_precision('high') allows it)")
    return None


def switch(config: dict, key: str, env: str, default: str) -> str:
    """A kernel's switch: ``config[key]``, else the environment variable ``env``, else ``default`` (None counts as
    unset), as one of ``auto``, ``on``, ``off``; anything else is an error naming both."""
    value = config.get(key)
    value = str(os.environ.get(env, default) if value is None else value).lower()
    if value in ("0", "false", "off", "no"):
        return "off"
    if value in ("1", "true", "on", "yes"):
        return "on"
    if value != "auto":
        raise ValueError(f"{key} / {env} must be auto, 0 or 1, got {value!r}")
    return "auto"


def tensor_core_reason(v: torch.Tensor, k: torch.Tensor, beta, states: int, channels: int, products: str) -> str | None:
    """What the tensor-core kernels (the corrections, the forward's local pass) first refuse: CPU tensors, dtypes
    (:func:`tf32_dtype_reason`), beta absent or in another dtype than ``v``, a state size other than ``states``, a
    head dimension not a multiple of ``channels``; None where none applies."""
    if not v.is_cuda:
        return "not a CUDA tensor"
    reason = tf32_dtype_reason(v, k, products)
    if reason is not None:
        return reason
    if beta is None or beta.dtype != v.dtype:
        return "beta absent, or in another dtype than v"
    if k.shape[-1] != states:
        return f"{k.shape[-1]} states (the kernel is written for {states})"
    if v.shape[-1] % channels:
        return f"head dimension {v.shape[-1]} (a multiple of {channels})"
    return None


class CompileError(RuntimeError):
    """NVRTC refused a source, or no NVRTC library was found."""


class LoadError(RuntimeError):
    """The driver could not load a compiled module or find its kernel."""


def _library(names: list) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def nvrtc() -> ctypes.CDLL | None:
    """libnvrtc: ``PALIMPSA_NVRTC`` (a path), else the one of PyTorch's CUDA version (loaded with PyTorch or in its
    ``nvidia`` wheels), else any ``nvidia-cuda-nvrtc`` wheel's on ``sys.path``; None where none loads."""
    names = [os.environ.get("PALIMPSA_NVRTC", "")]
    if torch.version.cuda:
        names.append(f"libnvrtc.so.{torch.version.cuda.split('.')[0]}")
    for path in sys.path:
        for sub in ("cuda_nvrtc", "cu*"):
            names += sorted(glob.glob(os.path.join(path, "nvidia", sub, "lib", "libnvrtc.so.*")))
    return _library([n for n in names if n])


def compile_source(source: str, filename: str, options: list, what: str) -> bytes:
    """``source`` compiled by NVRTC with ``options`` (``--gpu-architecture=sm_90a`` and the like): the cubin's bytes
    (``what`` names the kernel in errors)."""
    lib = nvrtc()
    if lib is None:
        raise CompileError("no libnvrtc found: install PyTorch's CUDA build (or pip install nvidia-cuda-nvrtc-cu12), "
                           "or set PALIMPSA_NVRTC to the library's path")
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None):
        raise CompileError("nvrtcCreateProgram failed")
    try:
        array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        if lib.nvrtcCompileProgram(prog, len(options), array):
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            arch = next((o.split("=", 1)[1] for o in options if o.startswith("--gpu-architecture=")), "?")
            raise CompileError(f"NVRTC could not compile {what} ({arch}): {log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        if lib.nvrtcGetCUBIN(prog, cubin):
            raise CompileError("nvrtcGetCUBIN failed")
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@functools.lru_cache(maxsize=1)
def driver() -> ctypes.CDLL:
    lib = _library(["libcuda.so.1", "libcuda.so"])
    if lib is None:
        raise LoadError("no libcuda.so.1 (the NVIDIA driver) found")
    return lib


def check(code: int, what: str, error: type = RuntimeError):
    if code:
        raise error(f"{what} failed with CUDA error {code}")


def arch(device: int) -> str:
    """The ``--gpu-architecture`` of a device: ``sm_90a`` on Hopper (the ``a`` features), ``sm_XY`` elsewhere."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


@functools.cache
def _primary_context(device: int) -> int:
    lib = driver()
    check(lib.cuInit(0), "cuInit", LoadError)
    ordinal, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(ordinal), device), "cuDeviceGet", LoadError)
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ordinal), "cuDevicePrimaryCtxRetain", LoadError)
    return ctx.value


def make_current(device: int):
    """The device's primary context (PyTorch's) current on this thread, without a synchronisation, so that a first
    load may happen during CUDA-graph capture. Call it inside ``torch.cuda.device(device)``."""
    lib, ctx = driver(), _primary_context(device)
    current = ctypes.c_void_p()
    check(lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent", LoadError)
    if current.value != ctx:
        check(lib.cuCtxSetCurrent(ctypes.c_void_p(ctx)), "cuCtxSetCurrent", LoadError)


def load(device: int, cubin: bytes, name: str, shared: int) -> ctypes.c_void_p:
    """Kernel ``name`` of ``cubin`` loaded on ``device`` (modules stay loaded for the process), allowed ``shared``
    bytes of dynamic shared memory."""
    lib = driver()
    with torch.cuda.device(device):
        make_current(device)
        module, func = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData", LoadError)
        check(lib.cuModuleGetFunction(ctypes.byref(func), module, name.encode()), "cuModuleGetFunction", LoadError)
        check(lib.cuFuncSetAttribute(func, _MAX_DYNAMIC_SHARED, shared), "cuFuncSetAttribute", LoadError)
    return func


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` contiguous and 16-byte aligned (the kernels' ``cp.async`` copies read 16 bytes at once)."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def launch(func, device: torch.device, grid: tuple, threads: int, shared: int, tensors: list, ints: list):
    """``func`` on PyTorch's current stream of ``device``: its pointer arguments the ``tensors``' data (None: a null
    pointer), then the 32-bit ``ints``."""
    if any(not -2**31 <= i < 2**31 for i in ints):
        raise ValueError(f"a kernel argument does not fit a 32-bit int: {ints}")
    values = [ctypes.c_void_p(t.data_ptr() if t is not None else 0) for t in tensors] + [ctypes.c_int(i)
                                                                                       for i in ints]
    args = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in values])
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index):
        make_current(index)
        stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
        check(driver().cuLaunchKernel(func, *grid, threads, 1, 1, shared, stream, args, None), "cuLaunchKernel")
