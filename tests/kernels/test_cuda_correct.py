"""The chunk-parallel backward's corrections in CUDA C++ (``palimpsa.kernels.cuda_correct``) on the CPU.

NVRTC compiles the kernel for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin. With bf16, fp16
and float32 inputs, and float32 values with bf16 keys, at 2.7b shapes and a small one with packed sequences and a
final-state gradient: its registers within ``__launch_bounds__`` (one 8-warp CTA an SM, the adjoint's B fragments
held in 128 registers a lane), no local memory or stack, its shared memory (two buffers of a tile's copies, the A
fragments, the decays and the warps' shares of the decay gradient) within an H100's or H200's 227 KB a CTA and equal
to the source's ``sizeof(Shared)``, its products as TF32 tensor-core instructions (``mma.m16n8k8``: HMMA) and
nothing else, ``dk`` added by four-state vector atomics and the decay gradient by one scalar atomic a token, and its
barriers where the source puts them (two a tile, none among the products and atomics). Then the dispatch on CPU
tensors (``CORRECT`` "cuda" refuses with the reason, "auto" never takes it), auto's other rules with the kernel's
reasons patched away, ``correct_default``, and, under the Triton interpreter, a chunk-parallel backward that asks
for the kernel. Its gradients are checked on a GPU against float64 and the Triton corrections
(docs/bench/cuda-correct-2026-11-29).
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter

import pytest
import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import chunked_bwd, cuda_build, cuda_correct

# heads, groups, head dim, chunk, packed sequences, final-state gradient
SHAPES = {"2.7b": (80, 1, 64, 512, False, False), "small": (8, 2, 128, 64, True, True)}
DTYPES = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "f32": (torch.float32, None),
          "f32-bf16-keys": (torch.float32, torch.bfloat16)}  # values, gains and their gradients; keys
LAUNCHES = [(d, s) for d in DTYPES for s in SHAPES]
IDS = [f"{d}-{s}" for d, s in LAUNCHES]
MAX_SHARED = 227 * 1024  # the most dynamic shared memory a CTA may ask for on compute capability 9.0
TF32_MMA = "HMMA.1688.F32.TF32"  # mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
# a warp's products a tile: 2 sixteen-token halves x (K E_M^T and K^2 E_I^T over 16 k-steps, V E_M and B E_I over 8
# k-steps for each of 2 state tiles)
MMAS = 2 * (16 + 16 + 8 * 2 + 8 * 2)
BARRIER = "BAR.SYNC.DEFER_BLOCKING"
SCALAR_ADD = "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"  # red.global.add.f32: the decay gradient
VECTOR_ADD = "REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU"  # red.global.add.v4.f32: dk, four states at once


@functools.cache
def disassembly(dtype: str, shape: str, order: int = 0) -> str:
    values, keys = DTYPES[dtype]
    heads, groups, head_dim, chunk, varlen, final = SHAPES[shape]
    return sass(cuda_correct.compile_cubin(values, heads, groups, head_dim, chunk, varlen=varlen, final=final,
                                           arch="sm_90a", key_dtype=keys, order=order))


def opcodes(text: str) -> list:
    return [op for _, op, _ in instructions(text)]


def addresses(text: str, opcode: str) -> list:
    return [at for at, op, _ in instructions(text) if op == opcode]


def reductions(text: str) -> Counter:
    """The global reductions' full opcodes, counted (``instructions`` stops an opcode at the lowercase x of
    ``F32x4``)."""
    return Counter(re.findall(r"\bREDG\.\S+", text))


def backward_branches(text: str) -> list:
    """Every branch to an earlier address, as (target, branch): the loops the SASS kept."""
    found = []
    for at, op, rest in instructions(text):
        target = re.search(r"0x[0-9a-f]+", rest)
        if op.startswith("BRA") and target and int(target.group(0), 16) < at:
            found.append((int(target.group(0), 16), at))
    return found


def tile_loop(text: str) -> tuple:
    """The narrowest loop holding every tensor-core product: the tiles' loop (its count ``n_tiles`` is known only at
    run time, so ptxas keeps it), as (first address, back branch)."""
    mmas = addresses(text, TF32_MMA)
    around = [(start, end) for start, end in backward_branches(text) if start <= mmas[0] and mmas[-1] <= end]
    assert around, "no loop around the tensor-core products"
    return min(around, key=lambda loop: loop[1] - loop[0])


def assert_within_bounds(text: str):
    assert "code for sm_90a" in text
    used = resources(text)
    assert used["REG"] <= 255 and used["LOCAL"] == 0 and used["STACK"] == 0, used
    ops = opcodes(text)
    assert ops.count(TF32_MMA) == MMAS
    assert [op for op in ops if op.startswith("HMMA") and op != TF32_MMA] == []


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_compiles_within_bounds(dtype, shape):
    """One 8-warp CTA an SM: at most 255 registers a thread, no local memory and no stack (the adjoint's 128
    registers of B fragments a lane stay in registers); the shared memory within 227 KB; the products as TF32
    tensor-core instructions only, 128 in the SASS: the tile loop's body once (its count is known only at run time),
    each of its 2 sixteen-token halves 16 + 16 products for ``dv``, ``dbeta`` (``K E_M^T``, ``K^2 E_I^T``) and 8 x 2 +
    8 x 2 for ``dk`` (``V E_M``, ``B E_I`` over the warp's two state tiles)."""
    assert_within_bounds(disassembly(dtype, shape))
    values, keys = DTYPES[dtype]
    assert cuda_correct.shared_bytes(values, keys, SHAPES[shape][3]) <= MAX_SHARED


@pytest.mark.parametrize("dtype, shape", [("bf16", "2.7b"), ("bf16", "small"), ("f32", "2.7b")],
                         ids=["bf16-2.7b", "bf16-small", "f32-2.7b"])
def test_global_reductions(dtype, shape):
    """Two kinds of global reduction and no other: ``dk`` four states at a time (``red.global.add.v4.f32``) and the
    decay gradient by one scalar add a token. The vector adds number 8 in the SASS, every loop around them unrolled:
    2 sixteen-token halves x 2 state tiles x the two branches of a lane pair (the even lane adds token ``ra``'s four
    states, the odd one token ``rb``'s), each under its own token bound; written as scalar adds they would be 4 times
    as many and of the other kind. The scalar adds are the tokens a thread holds in the decay gradients' prefix sum,
    ``ceil(chunk / 256)`` (2 at a 512-token chunk, 1 at 64), the loop over them unrolled."""
    found = reductions(disassembly(dtype, shape))
    assert set(found) == {SCALAR_ADD, VECTOR_ADD}, found
    assert found[VECTOR_ADD] == 2 * 2 * 2
    assert found[SCALAR_ADD] == -(-SHAPES[shape][3] // cuda_correct.THREADS)


def test_barriers():
    """The barriers are the source's ``__syncthreads()``: 3 before the tiles (the warps' sums of the log decays
    written; the decays after each token written and those sums read; the checkpoint terms' sums written), 2 a tile
    (its copies landed and the tile before done with; its A fragments written), 3 at the end (every tile's shares of
    the decay gradient written; the warps' prefix sums: the scratch free, then written): 8 in the SASS, exactly 2 in
    the tile loop, and none from the first tensor-core product to the last ``dk`` atomic, whose sums over a token's
    channels stay in a warp (shuffles)."""
    text = disassembly("bf16", "2.7b")
    bars = addresses(text, BARRIER)
    start, end = tile_loop(text)
    assert len(bars) == 3 + 2 + 3
    assert [sum(at < start for at in bars), sum(start <= at <= end for at in bars), sum(end < at for at in bars)] \
        == [3, 2, 3]
    first = addresses(text, TF32_MMA)[0]
    last = max(at for at, op, rest in instructions(text) if op.startswith("REDG") and rest.startswith("x4"))
    assert start < first < last < end
    assert not [at for at in bars if first <= at <= last]


def test_shared_memory():
    """``shared_bytes`` is the kernel's ``sizeof(Shared)`` for every dtype combination and for chunks of 64 and 512
    tokens (NVRTC checks a ``static_assert`` on the source's structs, whose decays and shares take ``CT`` floats
    each). Only the raw copies depend on the dtypes, two buffers of 32 tokens each: bf16 and fp16 take the same,
    float32 values, gains and the local ``dv``, ``dbeta`` 2 x 4 x 32 x 64 x 2 bytes more, float32 keys 2 x 32 x 128 x 2
    more; a chunk's token takes 9 floats (its decay and 8 warps' shares)."""
    bf16, f32 = torch.bfloat16, torch.float32
    half, mixed, full = (cuda_correct.shared_bytes(*dtypes) for dtypes in [(bf16,), (f32, bf16), (f32,)])
    assert cuda_correct.shared_bytes(torch.float16) == half < mixed < full
    assert mixed - half == 2 * 4 * 32 * 64 * (4 - 2) and full - mixed == 2 * 32 * 128 * (4 - 2)
    assert cuda_correct.shared_bytes(bf16, f32) - half == 2 * 32 * 128 * (4 - 2)
    assert cuda_correct.shared_bytes(bf16, chunk=512) - cuda_correct.shared_bytes(bf16, chunk=64) == 9 * 448 * 4
    structs = cuda_correct.SOURCE[:cuda_correct.SOURCE.index('extern "C"')]  # up to the kernel
    for values, keys in [*DTYPES.values(), (bf16, f32)]:
        for chunk in (64, 512):
            size = cuda_correct.shared_bytes(values, keys, chunk)
            source = structs + f'static_assert(sizeof(Shared) == {size}, "shared_bytes");\n'
            cuda_build.compile_source(source, "shared.cu", ["--gpu-architecture=sm_90a", "-std=c++17",
                                                            *cuda_correct.dtype_options(values, keys),
                                                            f"-DCT={chunk}"], "the shared-memory layout")


FIXCP_LAUNCHES = [("bf16", "2.7b"), ("f32-bf16-keys", "2.7b"), ("f32", "small")]  # 16-bit, mixed, float32 keys


@pytest.mark.parametrize("dtype, shape", FIXCP_LAUNCHES, ids=[f"{d}-{s}" for d, s in FIXCP_LAUNCHES])
def test_copies_at_fixed_offsets(dtype, shape):
    """The default build (``FIXCP`` 1): each thread's copies of a tile in loops of known trip count, so that the
    SASS holds each copy once (keys, then values, gains and the local pass's ``dv``, ``dbeta``: 2 + 4 in 16-bit, 4 +
    8 in float32, where a 16-byte copy holds half as many elements) instead of the general loop's unrolled bodies
    (``FIXCP`` 0); within the same bounds, with the same products and barriers, and fewer instructions."""
    values, keys = DTYPES[dtype]
    heads, groups, head_dim, chunk, varlen, final = SHAPES[shape]
    fixed = disassembly(dtype, shape)
    general = sass(cuda_correct.compile_cubin(values, heads, groups, head_dim, chunk, varlen=varlen, final=final,
                                              key_dtype=keys, fixcp=0))
    assert_within_bounds(fixed)
    per_key, per_value = (2 if (keys or values).itemsize == 2 else 4), (4 if values.itemsize == 2 else 8)
    assert sum(op.startswith("LDGSTS") for op in opcodes(fixed)) == 2 * (per_key + per_value)  # two call sites
    assert sum(op.startswith("LDGSTS") for op in opcodes(general)) > 2 * (per_key + per_value)
    assert opcodes(fixed).count(BARRIER) == opcodes(general).count(BARRIER)
    assert len(opcodes(fixed)) < len(opcodes(general))


@pytest.mark.parametrize("dtype", ["bf16", "f32-bf16-keys"])
def test_chunks_first_order_compiles(dtype):
    """``ORDER`` 1 (``CORRECT_ORDER`` in a config: a head's chunks run at once) compiles within the same bounds as
    the default order, with the same 128 TF32 products, and is another kernel (its CTA index decoded the other
    way)."""
    text = disassembly(dtype, "2.7b", order=1)
    assert_within_bounds(text)
    assert opcodes(text) != opcodes(disassembly(dtype, "2.7b"))


def test_the_longest_chunk_fits_shared_memory():
    """``MAX_CHUNK`` (the longest chunk ``unsupported`` lets through) keeps every dtype's shared memory within 227 KB
    and is a whole number of tiles."""
    assert cuda_correct.MAX_CHUNK % cuda_correct.TILE == 0
    for values, keys in DTYPES.values():
        assert cuda_correct.shared_bytes(values, keys, cuda_correct.MAX_CHUNK) <= MAX_SHARED


def test_compile_error():
    """An architecture NVRTC does not know raises its log as a ``CompileError`` naming the kernel."""
    with pytest.raises(cuda_build.CompileError, match="NVRTC could not compile the corrections"):
        cuda_correct.compile_cubin(torch.bfloat16, *SHAPES["2.7b"][:4], arch="sm_1")


def cpu_inputs(dtype=torch.bfloat16, key_dtype=None, head_dim=64):
    v = torch.zeros(1, 32, 2, head_dim, dtype=dtype)
    k = torch.zeros(1, 32, 1, 128, dtype=key_dtype or dtype)
    return v, k, torch.zeros_like(v)


def test_unsupported_reasons():
    """What the kernel refuses, named: here every CPU tensor, whatever its dtypes (the reason checked first; the
    dtype, TF32 and shape reasons come after it and need CUDA tensors)."""
    for values, keys in [*DTYPES.values(), (torch.bfloat16, torch.float32)]:
        v, k, beta = cpu_inputs(values, keys)
        assert cuda_correct.unsupported(v, k, beta, 512) == "not a CUDA tensor"


def test_dispatch_on_cpu():
    """``CORRECT`` "cuda" asks for the kernel and refuses, with the reason, where it cannot run; "auto" does not take
    it on CPU tensors, nor does "triton" ever; "cuda" is one of ``chunked_bwd.CORRECTS`` (with "auto") and of the
    kernels that ``CORRECT_RUNS`` counts (with "triton")."""
    v, k, beta = cpu_inputs()
    assert {"cuda", "auto"} <= set(chunked_bwd.CORRECTS) and {"cuda", "triton"} <= set(chunked_bwd.CORRECT_RUNS)
    with pytest.raises(ValueError, match=r"CUDA corrections cannot run here \(not a CUDA tensor\)"):
        chunked_bwd._cuda_correct_plan({"CORRECT": "cuda"}, v, k, beta, 512, "tf32")
    for correct in ("auto", "triton"):
        assert chunked_bwd._cuda_correct_plan({"CORRECT": correct}, v, k, beta, 512, "tf32") is False


def test_auto_rules(monkeypatch):
    """With the kernel's own reasons patched away (``unsupported`` None), "auto" takes it only where the products
    would be TF32 anyway (not IEEE or tf32x3), it has not failed in this process (``CUDA_CORRECT_FAILED``) and the
    config leaves every key of the Triton corrections (``CORRECT_TRITON_KEYS``) at its shipped value; "cuda" takes
    it regardless, and "triton" never."""
    monkeypatch.setattr(cuda_correct, "unsupported", lambda *args: None)
    monkeypatch.setattr(chunked_bwd, "CUDA_CORRECT_FAILED", None)
    v, k, beta = cpu_inputs()

    def plan(changes=None, dot="tf32", correct="auto"):
        config = {**chunked_bwd._SHIPPED, "CORRECT": correct, **(changes or {})}
        return chunked_bwd._cuda_correct_plan(config, v, k, beta, 512, dot)

    assert plan() is True
    assert plan(dot="ieee") is False and plan(dot="tf32x3") is False
    assert plan(dot="ieee", correct="cuda") is True and plan(correct="triton") is False
    assert plan({"BT": 32}) is False
    assert plan({"BT": chunked_bwd._SHIPPED["BT"]}) is True
    changed = {"BP": 32, "BT": 32, "DOT": "tf32", "correct_warps": 8, "correct_early": 0}
    for key in chunked_bwd.CORRECT_TRITON_KEYS:
        value = changed.get(key, "changed")
        assert value != chunked_bwd._SHIPPED.get(key)
        assert plan({key: value}) is False, key
    monkeypatch.setattr(chunked_bwd, "CUDA_CORRECT_FAILED", "CompileError: earlier")
    assert plan() is False and plan(correct="cuda") is True


def test_correct_default(monkeypatch):
    """A config without ``CORRECT`` runs "auto" as shipped, ``PALIMPSA_CHUNKED_CORRECT``'s choice where set (a value
    other than the three refused, naming the variable), and ``CHUNKED_CONFIG``'s where a caller changed it, over the
    environment."""
    monkeypatch.delenv(chunked_bwd.CORRECT_ENV, raising=False)
    assert chunked_bwd.CORRECT_ENV == "PALIMPSA_CHUNKED_CORRECT"
    assert chunked_bwd.correct_default() == "auto"
    monkeypatch.setenv(chunked_bwd.CORRECT_ENV, "triton")
    assert chunked_bwd.correct_default() == "triton"
    monkeypatch.setenv(chunked_bwd.CORRECT_ENV, "tensor-cores")
    with pytest.raises(ValueError, match=chunked_bwd.CORRECT_ENV):
        chunked_bwd.correct_default()
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "CORRECT", "cuda")
    assert chunked_bwd.correct_default() == "cuda"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_chunked_backward_dispatch():
    """A chunk-parallel backward split in two (3 chunks of 8 tokens: the local pass, the carry, then the corrections)
    that asks for the CUDA corrections on CPU tensors refuses with the reason; under "auto" it runs the Triton
    corrections, once, and its gradients are those of a backward that asks for them."""
    from palimpsa.kernels import fused_recurrent
    from scan_inputs import make_inputs

    def gradients(correct):
        inputs = make_inputs(1, 20, 2, 1, 4, 16, requires_grad=True, device="cpu")
        y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
            inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False,
            None, fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
            bwd_config={"kernel": "chunked", "CORRECT": correct, "NSPLIT": 2}, chunk_size=8, block_size=4)
        y.sum().backward()
        return [inputs[name].grad for name in ("v", "k", "q", "log_decay", "beta")]

    with pytest.raises(ValueError, match=r"CUDA corrections cannot run here \(not a CUDA tensor\)"):
        gradients("cuda")
    before = dict(chunked_bwd.CORRECT_RUNS)
    auto = gradients("auto")
    assert chunked_bwd.CORRECT_RUNS["triton"] == before["triton"] + 1
    assert chunked_bwd.CORRECT_RUNS["cuda"] == before["cuda"]
    for got, want in zip(auto, gradients("triton")):
        assert torch.equal(got, want)


@pytest.mark.parametrize("error, choice, raises", [
    (cuda_build.CompileError("NVRTC could not compile the corrections (sm_90a): error"), "auto", False),
    (cuda_build.LoadError("cuModuleLoadData failed with CUDA error 218"), "auto", False),
    (OSError("libnvrtc.so.12: cannot open shared object file"), "auto", False),
    (cuda_build.CompileError("NVRTC could not compile the corrections (sm_90a): error"), "cuda", True),
    (RuntimeError("cuLaunchKernel failed with CUDA error 701"), "auto", True),
], ids=["compile", "load", "oserror", "compile-cuda", "launch"])
def test_a_failed_build_leaves_auto_to_the_triton_corrections(error, choice, raises, monkeypatch):
    """A compile or load error (or no NVRTC library) under ``CORRECT`` "auto" warns, sets ``CUDA_CORRECT_FAILED``
    (so later calls take the Triton kernel) and returns False for the caller to run it; under "cuda", and for a launch
    error, the error propagates and nothing is given up."""
    monkeypatch.setattr(chunked_bwd, "CUDA_CORRECT_FAILED", None)

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(cuda_correct, "launch", fail)
    args = [None] * 11 + [(None,) * 7] + [None] * 6  # v .. di_t, the buffers, cu_seqlens .. use_final_grad
    if raises:
        with pytest.raises(type(error)):
            chunked_bwd._cuda_correct({"CORRECT": choice}, *args)
        assert chunked_bwd.CUDA_CORRECT_FAILED is None
    else:
        with pytest.warns(UserWarning, match="the CUDA corrections of the chunk-parallel backward failed"):
            assert chunked_bwd._cuda_correct({"CORRECT": choice}, *args) is False
        assert chunked_bwd.CUDA_CORRECT_FAILED.startswith(type(error).__name__)
        monkeypatch.setattr(cuda_correct, "unsupported", lambda *args: None)
        config = {**chunked_bwd._SHIPPED, "CORRECT": "auto"}
        assert chunked_bwd._cuda_correct_plan(config, None, None, None, 512, "tf32") is False
