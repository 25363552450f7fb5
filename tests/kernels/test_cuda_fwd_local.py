"""The chunked forward's local pass in CUDA C++ (``palimpsa.kernels.cuda_fwd_local``) on the CPU.

NVRTC compiles it for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin: in both forms (warpgroup
products, mma.sync), in bf16, fp16, float32 and float32 values with bf16 keys, at 2.7b shapes and a small one with
packed sequences, its registers within ``__launch_bounds__`` (two 8-warp CTAs an SM), no local memory, its sums as
TF32 tensor-core products and no others, its shared memory as ``shared_bytes`` says; float64 transcriptions of one
CTA's index formulas (each form's, lane by lane, the warpgroup form's B operands through the 128-byte swizzle as the
PTX ISA describes the hardware reading them) against the sums it is to write. Then the dispatch on CPU tensors (auto
by default, which CPU tensors never take; an error naming the reason where asked for and it cannot run; the Triton
kernel's keys keeping that kernel) and the chunked forward's call of it under the interpreter (its arguments those of
the Triton kernel; what a failure does under auto and on). On the GPU, ``scripts/check_scan_gpu.py`` checks it against
float64 (docs/bench/fwd-local-2026-11-29).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import cuda_build, cuda_fwd_local

SHAPES = {"2.7b": (80, 1, 64, 512), "small": (8, 2, 128, 256)}  # heads, groups, head dim, chunk
DTYPES = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "f32": (torch.float32, None),
          "f32-bf16-keys": (torch.float32, torch.bfloat16)}  # values and gains; keys
LAUNCHES = [(d, s) for d in DTYPES for s in SHAPES]
IDS = [f"{d}-{s}" for d, s in LAUNCHES]
TF32_MMA = "HMMA.1688.F32.TF32"
WGMMA_OP = "HGMMA.64"  # the disassembler's opcode pattern stops at the shape's "x64x8.F32.TF32"
MAX_SHARED = 227 * 1024


@functools.cache
def disassembly(dtype: str, shape: str, wgmma: bool = True) -> str:
    values, keys = DTYPES[dtype]
    return sass(cuda_fwd_local.compile_cubin(values, *SHAPES[shape], varlen=shape == "small", key_dtype=keys,
                                             wgmma=wgmma))


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_compiles_within_bounds(dtype, shape):
    """The warpgroup form (sm_90a's default). Two 8-warp CTAs an SM: at most 128 registers a thread, no local memory
    (a thread's 32 accumulators of M and of J and its 32 A-fragment registers stay in registers); a stage's 4 k-steps
    of 2 warpgroup products (M and J, 64 states x 64 channels x 8 tokens) and no other products, waited for once; the
    two barriers of a stage and the weights' one; the shared memory at most half of 227 KB (two CTAs an SM) in every
    dtype."""
    text = disassembly(dtype, shape)
    assert "code for sm_90a" in text
    used = resources(text)
    assert used["REG"] <= 128 and used["LOCAL"] == 0 and used["STACK"] == 0, used
    listed = instructions(text)
    ops = [op for _, op, _ in listed]
    products = [args.split()[0] for _, op, args in listed if "MMA" in op]
    assert products == ["x64x8.F32.TF32"] * (2 * cuda_fwd_local.STAGE // 8)
    assert [op for op in ops if "MMA" in op and op != WGMMA_OP] == []
    assert ops.count("WARPGROUP.DEPBAR.LE") == 1 and ops.count("WARPGROUP.ARRIVE") == 1
    assert sum(op.startswith("BAR.SYNC") for op in ops) == 3
    assert cuda_fwd_local.shared_bytes(*DTYPES[dtype], SHAPES[shape][3], wgmma=True) <= MAX_SHARED // 2 - 1024


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_mma_sync_form_compiles_within_bounds(dtype, shape):
    """The mma.sync form (targets other than sm_90a, and ``WGMMA`` False): at most 128 registers, no local memory (a
    lane's 2 x 4 accumulators of M and of J stay in registers); a stage's 4 k-steps of 16 tensor-core products a warp
    (2 state tiles x 4 channel tiles x M, J), no other products; the two barriers of a stage and the weights' one."""
    text = disassembly(dtype, shape, wgmma=False)
    used = resources(text)
    assert used["REG"] <= 128 and used["LOCAL"] == 0 and used["STACK"] == 0, used
    ops = [op for _, op, _ in instructions(text)]
    assert ops.count(TF32_MMA) == 16 * cuda_fwd_local.STAGE // 8
    assert [op for op in ops if "MMA" in op and op != TF32_MMA] == []
    assert sum(op.startswith("BAR.SYNC") for op in ops) == 3
    assert cuda_fwd_local.shared_bytes(*DTYPES[dtype], SHAPES[shape][3]) <= MAX_SHARED // 2 - 1024


def test_which_targets_take_the_warpgroup_products(monkeypatch):
    """sm_90a only (the other targets have no ``wgmma``), and not where ``WGMMA`` is False."""
    assert cuda_fwd_local.uses_wgmma("sm_90a") and not cuda_fwd_local.uses_wgmma("sm_80")
    assert not cuda_fwd_local.uses_wgmma("sm_90a", False) and not cuda_fwd_local.uses_wgmma("sm_89", True)
    monkeypatch.setattr(cuda_fwd_local, "WGMMA", False)
    assert not cuda_fwd_local.uses_wgmma("sm_90a")
    assert TF32_MMA in sass(cuda_fwd_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"]))


@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma"])
def test_shared_memory(wgmma):
    """``shared_bytes`` is the kernel's ``SHARED_BYTES`` (NVRTC checks a ``static_assert`` on the source's structs and
    macros) for every dtype and two chunk sizes, in both forms; 16-bit values take half the rows of float32 ones."""
    structs = cuda_fwd_local.SOURCE[:cuda_fwd_local.SOURCE.index('extern "C"')]
    for values, keys in DTYPES.values():
        for chunk in (256, 512):
            size = cuda_fwd_local.shared_bytes(values, keys, chunk, wgmma)
            source = structs + f'static_assert(SHARED_BYTES == {size}, "shared_bytes");\n'
            cuda_build.compile_source(source, "shared.cu", ["--gpu-architecture=sm_90a", "-std=c++17",
                                                            *cuda_fwd_local.layout_options(),
                                                            *cuda_fwd_local.dtype_options(values, keys),
                                                            f"-DCT={chunk}", "-DVARLEN=0", f"-DWGMMA={int(wgmma)}"],
                                      "the shared-memory layout")
    bf16, f32 = torch.bfloat16, torch.float32
    stage = cuda_fwd_local.STAGE
    assert (cuda_fwd_local.shared_bytes(f32, bf16, wgmma=wgmma) - cuda_fwd_local.shared_bytes(bf16, wgmma=wgmma)
            == 2 * stage * 2 * (cuda_fwd_local.CHANNELS + cuda_fwd_local.PAD) * 2)


def test_chunks_it_cannot_tile_do_not_compile():
    """A chunk that is not a multiple of the CTA's threads is refused by the source itself."""
    with pytest.raises(cuda_build.CompileError, match="CT must be a multiple of THREADS and ST"):
        cuda_fwd_local.compile_cubin(torch.bfloat16, 8, 1, 64, 128)


def cpu_inputs(dtype=torch.bfloat16, head_dim=64, states=128, with_beta=True):
    v = torch.zeros(1, 4, 2, head_dim, dtype=dtype)
    k = torch.zeros(1, 4, 1, states, dtype=dtype)
    return v, k, torch.zeros_like(v) if with_beta else None


@pytest.mark.parametrize("value, want", [
    (None, "auto"), (0, "off"), ("0", "off"), ("off", "off"), (False, "off"), ("auto", "auto"), ("AUTO", "auto"),
    (1, "on"), ("1", "on"), ("on", "on"), ("yes", "on"), (True, "on"),
])
def test_mode(value, want, monkeypatch):
    """``local_CUDA`` parses as auto, on or off; unset (None) is auto."""
    monkeypatch.delenv(cuda_fwd_local.ENV, raising=False)
    assert cuda_fwd_local.DEFAULT == "auto"
    assert cuda_fwd_local.mode({"local_CUDA": value}) == want


def test_mode_environment_and_junk(monkeypatch):
    """``PALIMPSA_CUDA_FWD_LOCAL`` counts where the config leaves the key unset; anything but auto, 0 or 1 is an
    error."""
    monkeypatch.setenv(cuda_fwd_local.ENV, "1")
    assert cuda_fwd_local.mode({}) == "on" and cuda_fwd_local.mode({"local_CUDA": None}) == "on"
    assert cuda_fwd_local.mode({"local_CUDA": 0}) == "off"
    monkeypatch.setenv(cuda_fwd_local.ENV, "auto")
    assert cuda_fwd_local.mode({}) == "auto"
    monkeypatch.setenv(cuda_fwd_local.ENV, "maybe")
    with pytest.raises(ValueError, match="must be auto, 0 or 1, got 'maybe'"):
        cuda_fwd_local.mode({})
    with pytest.raises(ValueError, match="must be auto, 0 or 1"):
        cuda_fwd_local.mode({"local_CUDA": 2})


def test_cpu_tensors_never_take_it_and_asking_for_it_there_is_an_error(monkeypatch):
    """CPU tensors: not taken by default (auto) nor under auto; asked for, an error naming the reason (never a silent
    fallback)."""
    monkeypatch.delenv(cuda_fwd_local.ENV, raising=False)
    v, k, beta = cpu_inputs()
    assert cuda_fwd_local.unsupported(v, k, beta, 512) == "not a CUDA tensor"
    assert cuda_fwd_local.wanted(v, k, beta, 512, {}) is False
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": "auto"}) is False
    with pytest.raises(ValueError, match="cannot run here \\(not a CUDA tensor\\)"):
        cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": 1})


@pytest.mark.parametrize("named", [("BP",), ("DOT", "SUFFIX"), ("local_warps", "kernel")])
def test_the_triton_kernels_keys_keep_it(named, monkeypatch):
    """A caller's config that names a key of the Triton kernel's tiling or precision (which this kernel would
    ignore) keeps the Triton kernel under auto and is an error naming the keys under on."""
    v, k, beta = cpu_inputs()
    monkeypatch.setattr(cuda_fwd_local, "unsupported", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_fwd_local, "FAILED", None)
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": "auto"}, named) is False
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": "auto"}, ("kernel", "local_CUDA")) is True
    keys = ", ".join(sorted(key for key in named if key in cuda_fwd_local.TRITON_KEYS))
    with pytest.raises(ValueError, match=f"ignores the Triton kernel's keys {keys}: drop them"):
        cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": 1}, named)
    monkeypatch.setattr(cuda_fwd_local, "FAILED", "NVRTC could not compile the forward's local pass")
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": "auto"}) is False
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": 1}) is True


def test_more_sequences_than_its_grid_takes(monkeypatch):
    v, k, beta = cpu_inputs()
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert "65536 sequences (at most 65535" in cuda_fwd_local.unsupported(v, k, beta, 512, n_states=65536)


@pytest.mark.parametrize("capability, want", [((9, 0), True), ((8, 0), False), ((10, 0), False)])
def test_auto_takes_compute_capability_9(capability, want, monkeypatch):
    """``auto`` where it can run on compute capability 9.x only (the GPUs it is to be checked on); ``on`` wherever
    it can run."""
    v, k, beta = cpu_inputs()
    monkeypatch.setattr(cuda_fwd_local, "unsupported", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(cuda_fwd_local, "FAILED", None)
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": "auto"}) is want
    assert cuda_fwd_local.wanted(v, k, beta, 512, {"local_CUDA": 1}) is True


@pytest.mark.parametrize("dtype, head_dim, states, with_beta, chunk, reason", [
    (torch.float64, 64, 128, True, 512, "float64 values"),
    (torch.bfloat16, 64, 128, False, 512, "beta absent"),
    (torch.bfloat16, 64, 64, True, 512, "64 states"),
    (torch.bfloat16, 32, 128, True, 512, "head dimension 32"),
    (torch.bfloat16, 64, 128, True, 128, "chunk size 128"),
])
def test_unsupported_reasons(dtype, head_dim, states, with_beta, chunk, reason, monkeypatch):
    """What it refuses, by name, on inputs taken for a GPU's."""
    v, k, beta = cpu_inputs(dtype, head_dim, states, with_beta)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert reason in cuda_fwd_local.unsupported(v, k, beta, chunk)


def test_float32_at_full_precision_is_refused(monkeypatch):
    """Its products run in TF32, which PyTorch's "highest" float32 matmul precision forbids."""
    v, k, beta = cpu_inputs(torch.float32)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert "full precision" in cuda_fwd_local.unsupported(v, k, beta, 512)
    finally:
        torch.set_float32_matmul_precision(previous)


def test_the_chunked_forward_calls_it_with_the_triton_kernels_arguments(monkeypatch):
    """Where it is wanted, the chunked forward calls it instead of the Triton kernel, and counts it: here (under the
    interpreter) a stand-in that launches the Triton kernel from the arguments it is given, so that the outputs equal
    the Triton path's only if the arguments are the ones that kernel takes."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    from palimpsa.kernels import chunked_fwd, fused_recurrent
    from scan_inputs import make_inputs

    x = make_inputs(1, 29, 2, 2, 4, 16)
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], x["M0"], x["I0"], 0.7, None, True, False, True)
    monkeypatch.delenv(cuda_fwd_local.ENV, raising=False)
    monkeypatch.setattr(chunked_fwd, "LOCAL_RUNS", {"cuda": 0, "triton": 0})
    want = fused_recurrent._forward(*args, {"kernel": "chunked", "BT": 4}, 8)
    assert chunked_fwd.LOCAL_RUNS == {"cuda": 0, "triton": 1}
    calls = []

    def stand_in(v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, n_chunks, n_states, max_chunks, chunk):
        calls.append((n_chunks, n_states, max_chunks, chunk))
        heads, head_dim, state_size = v.shape[2], v.shape[3], k.shape[3]
        chunked_fwd.palimpsa_fwd_local_kernel[(n_chunks, heads, 1)](
            v, k, log_decay, beta, ck_m, ck_i, cu_seqlens, offsets, None, v.shape[1], H=heads, G=k.shape[2],
            P=head_dim, N=state_size, BP=head_dim, BK=state_size, CT=chunk, BT=4, USE_BETA=True,
            IS_VARLEN=False, DOT="ieee", ACC=fused_recurrent._acc_dtype(v.dtype), SUFFIX=1)

    monkeypatch.setattr(cuda_fwd_local, "wanted", lambda *a: True)
    monkeypatch.setattr(cuda_fwd_local, "local", stand_in)
    got = fused_recurrent._forward(*args, {"kernel": "chunked", "BT": 4}, 8)
    assert calls == [(4, 1, 4, 8)]
    assert chunked_fwd.LOCAL_RUNS == {"cuda": 1, "triton": 1}
    for a, b in zip(got, want, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("error, mode, raises, failed", [
    (torch.OutOfMemoryError("CUDA out of memory"), "auto", True, False),  # memory: the Triton kernel needs it too
    (cuda_build.CompileError("NVRTC could not compile the forward's local pass (sm_90a): error"), "auto", False, True),
    (cuda_build.LoadError("cuModuleLoadData failed with CUDA error 218"), "auto", False, True),
    (OSError("libnvrtc.so.12: cannot open shared object file"), "auto", False, True),
    (RuntimeError("cuLaunchKernel failed with CUDA error 701"), "auto", False, False),  # this call only
    (RuntimeError("cuLaunchKernel failed with CUDA error 701"), 1, True, False),
    (cuda_build.CompileError("NVRTC could not compile the forward's local pass (sm_90a): error"), 1, True, False),
], ids=["oom", "compile", "load", "oserror", "launch", "launch-on", "compile-on"])
def test_the_chunked_forward_when_it_fails(error, mode, raises, failed, monkeypatch):
    """Chosen and failing: out of memory raises; under auto a failed compile or load warns, records
    ``cuda_fwd_local.FAILED`` (auto then leaves it off in the process) and runs the Triton kernel, a failed launch
    warns and runs the Triton kernel for this call only; under on every error raises."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    from palimpsa.kernels import chunked_fwd, fused_recurrent
    from scan_inputs import make_inputs

    x = make_inputs(1, 20, 2, 1, 4, 16)
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], x["M0"], x["I0"], 0.7, None, True, False, True)
    want = fused_recurrent._forward(*args, {"kernel": "chunked"}, 8)

    def local(*args):
        raise error

    monkeypatch.delenv(cuda_fwd_local.ENV, raising=False)
    monkeypatch.setattr(cuda_fwd_local, "FAILED", None)
    monkeypatch.setattr(cuda_fwd_local, "unsupported", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_fwd_local, "local", local)
    monkeypatch.setattr(chunked_fwd, "LOCAL_RUNS", {"cuda": 0, "triton": 0})
    config = {"kernel": "chunked", "local_CUDA": mode}
    if raises:
        with pytest.raises(type(error), match=str(error).split(" (")[0]):
            fused_recurrent._forward(*args, config, 8)
        assert chunked_fwd.LOCAL_RUNS == {"cuda": 0, "triton": 0}
    else:
        with pytest.warns(RuntimeWarning, match="the CUDA local pass of the chunked forward failed"):
            got = fused_recurrent._forward(*args, config, 8)
        for a, b in zip(got, want, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
        assert chunked_fwd.LOCAL_RUNS == {"cuda": 0, "triton": 1}
    assert (cuda_fwd_local.FAILED == str(error)) if failed else cuda_fwd_local.FAILED is None


def emulate_weights(g, threads=cuda_fwd_local.THREADS):
    """Each token's weight as the kernel's threads, lanes and warps sum the log decays ``g`` [CT] after it."""
    ct = g.shape[0]
    per = ct // threads
    own, totals = torch.zeros(ct, dtype=torch.float64), torch.zeros(threads, dtype=torch.float64)
    for tid in range(threads):
        total = 0.0
        for e in reversed(range(per)):
            own[tid * per + e] = total
            total += float(g[tid * per + e])
        totals[tid] = total
    weights = torch.zeros(ct, dtype=torch.float64)
    warp_sums = [float(totals[32 * w:32 * w + 32].sum()) for w in range(threads // 32)]
    for tid in range(threads):
        w, ln = divmod(tid, 32)
        later = float(totals[tid + 1:32 * w + 32].sum())  # shfl_down's inclusive sums, then the lane after's
        warps = sum(warp_sums[w + 1:])
        for e in range(per):
            weights[tid * per + e] = torch.exp(own[tid * per + e] + (later + warps))
    return weights


def emulate_cta(k, v, b, g, threads=cuda_fwd_local.THREADS, stage=cuda_fwd_local.STAGE):
    """One CTA of the kernel's mma.sync form in float64, lane by lane: the weights as its threads, lanes and warps sum
    them, each warp's A and B fragments gathered from the staged rows by the source's index formulas,
    ``mma.m16n8k8`` by the PTX fragment layouts (A: rows ``gq``, ``gq + 8`` at columns ``tq``, ``tq + 4``; B: rows
    ``tq``, ``tq + 4`` at column ``gq``; C: rows ``gq``, ``gq + 8`` at columns ``2 tq``, ``2 tq + 1``), and the end
    states stored as the source stores them: ``M`` and ``J`` as ``[channel, state]`` (``k`` [CT, N], ``v``, ``b``
    [CT, CW], ``g`` [CT])."""
    ct, n = k.shape
    cw = v.shape[1]
    weights = emulate_weights(g, threads)
    M = torch.zeros(cw, n, dtype=torch.float64)
    J = torch.zeros(cw, n, dtype=torch.float64)
    for w in range(threads // 32):
        mp, nh = w >> 1, w & 1
        acc = {(name, mm, nn): torch.zeros(16, 8, dtype=torch.float64) for name in "MJ" for mm in range(2)
               for nn in range(4)}
        for s in range(ct // stage):
            for kb in range(stage // 8):
                frag_a = {mm: torch.zeros(16, 8, dtype=torch.float64) for mm in range(2)}
                frag_b = {nn: torch.zeros(2, 8, 8, dtype=torch.float64) for nn in range(4)}
                for ln in range(32):
                    gq, tq = ln >> 2, ln & 3
                    ta, tb = 8 * kb + tq, 8 * kb + tq + 4
                    for mm in range(2):
                        s0 = 16 * (2 * mp + mm) + gq
                        a = (k[s * stage + ta, s0], k[s * stage + ta, s0 + 8], k[s * stage + tb, s0],
                             k[s * stage + tb, s0 + 8])
                        for (row, col), x in zip(((gq, tq), (gq + 8, tq), (gq, tq + 4), (gq + 8, tq + 4)), a,
                                                 strict=True):
                            frag_a[mm][row, col] = x
                    wa, wb = weights[s * stage + ta], weights[s * stage + tb]
                    for nn in range(4):
                        ch = 8 * (4 * nh + nn) + gq
                        frag_b[nn][0, tq, gq] = v[s * stage + ta, ch] * wa
                        frag_b[nn][0, tq + 4, gq] = v[s * stage + tb, ch] * wb
                        frag_b[nn][1, tq, gq] = b[s * stage + ta, ch] * wa
                        frag_b[nn][1, tq + 4, gq] = b[s * stage + tb, ch] * wb
                for mm in range(2):
                    for nn in range(4):
                        acc["M", mm, nn] += frag_a[mm] @ frag_b[nn][0]
                        acc["J", mm, nn] += (frag_a[mm] * frag_a[mm]) @ frag_b[nn][1]
        for ln in range(32):
            gq, tq = ln >> 2, ln & 3
            for mm in range(2):
                for nn in range(4):
                    for e in range(4):
                        row, col = gq + 8 * (e >> 1), 2 * tq + (e & 1)
                        state, ch = 16 * (2 * mp + mm) + row, 8 * (4 * nh + nn) + col
                        M[ch, state] = acc["M", mm, nn][row, col]
                        J[ch, state] = acc["J", mm, nn][row, col]
    return M, J


def swizzled(address: int) -> int:
    """Where the 128-byte swizzle puts a byte of a 1024-aligned operand: the 16-byte chunk (bits 4-6) XOR the row
    within the 8-row group (bits 7-9), as the PTX ISA describes the tensor cores reading shared memory."""
    return address ^ (((address >> 7) & 7) << 4)


def emulate_cta_wgmma(k, v, b, g, threads=cuda_fwd_local.THREADS, stage=cuda_fwd_local.STAGE):
    """One CTA of the kernel's warpgroup form in float64: the weights as in :func:`emulate_weights`; each stage's B
    operands written into a byte-addressed buffer by the source's formulas (thread ``w``, ``ln``: tokens ``4 w + i``
    of channels ``ln`` and ``ln + 32`` at ``c * 128 + ((w ^ (c & 7)) << 4) + 4 i``), every slot once; each k-step's
    8 x 64 B read back through the descriptor (start ``32 kb``, rows ``n`` at ``(n >> 3) * 1024 + (n & 7) * 128``,
    the 128-byte swizzle); the A fragments by the wgmma register layout (warp ``wi`` of the warpgroup: rows
    ``16 wi + gq``, ``+ 8`` at columns ``tq``, ``tq + 4``), the accumulators' by its ``d[4 j + e]`` layout (row
    ``gq + 8 (e >> 1)``, column ``8 j + 2 tq + (e & 1)``), stored as the source stores them."""
    ct, n = k.shape
    cw = v.shape[1]
    assert cw == 64 and stage * 4 == 128
    weights = emulate_weights(g, threads)
    acc = {(name, wg): torch.zeros(64, cw, dtype=torch.float64) for name in "MJ" for wg in range(n // 64)}
    for s in range(ct // stage):
        t0 = s * stage
        buf = {"v": torch.full((cw * stage,), float("nan"), dtype=torch.float64)}
        buf["b"] = buf["v"].clone()
        for w in range(threads // 32):
            for ln in range(32):
                for half in range(2):
                    c = ln + 32 * half
                    for i in range(4):
                        off = c * 128 + ((w ^ (c & 7)) << 4) + 4 * i
                        for name, x in (("v", v), ("b", b)):
                            assert torch.isnan(buf[name][off // 4]), "a slot written twice"
                            buf[name][off // 4] = x[t0 + 4 * w + i, c] * weights[t0 + 4 * w + i]
        assert not torch.isnan(buf["v"]).any() and not torch.isnan(buf["b"]).any()
        for kb in range(stage // 8):
            operand = {name: torch.zeros(8, cw, dtype=torch.float64) for name in "vb"}
            for kk in range(8):
                for col in range(cw):
                    address = swizzled(32 * kb + (col >> 3) * 1024 + (col & 7) * 128 + 4 * kk)
                    for name in "vb":
                        operand[name][kk, col] = buf[name][address // 4]
            for wg in range(n // 64):
                a = torch.zeros(64, 8, dtype=torch.float64)
                for wi in range(4):
                    for ln in range(32):
                        gq, tq = ln >> 2, ln & 3
                        ta, tb, s0 = t0 + 8 * kb + tq, t0 + 8 * kb + tq + 4, 64 * wg + 16 * wi + gq
                        values = (k[ta, s0], k[ta, s0 + 8], k[tb, s0], k[tb, s0 + 8])
                        for e, x in enumerate(values):
                            a[16 * wi + gq + 8 * (e & 1), tq + 4 * (e >> 1)] = x
                acc["M", wg] += a @ operand["v"]
                acc["J", wg] += (a * a) @ operand["b"]
    M = torch.zeros(cw, n, dtype=torch.float64)
    J = torch.zeros(cw, n, dtype=torch.float64)
    for wg in range(n // 64):
        for wi in range(4):
            for ln in range(32):
                gq, tq = ln >> 2, ln & 3
                for j in range(cw // 8):
                    for e in range(4):
                        row, col = 16 * wi + gq + 8 * (e >> 1), 8 * j + 2 * tq + (e & 1)  # where d[4 j + e] is
                        state, ch = 64 * wg + 16 * wi + gq + 8 * (e >> 1), 8 * j + 2 * tq + (e & 1)  # the store's
                        M[ch, state] = acc["M", wg][row, col]
                        J[ch, state] = acc["J", wg][row, col]
    return M, J


@pytest.mark.parametrize("ct", [256, 512])
@pytest.mark.parametrize("emulate", [emulate_cta, emulate_cta_wgmma], ids=["mma", "wgmma"])
def test_the_kernels_index_arithmetic_sums_every_token_once(ct, emulate):
    """The design's check: ``emulate_cta`` and ``emulate_cta_wgmma``, transcriptions of each form's index formulas,
    lane by lane (not derived from ``SOURCE``, so they check the formulas as written there, not later edits of the
    source), against the sums the local pass is to write, in float64 at 256 and 512 tokens (one and two tokens a
    thread in the weights' scan): every state and channel written once, from every token, with the weight of exactly
    the log decays after it."""
    gen = torch.Generator().manual_seed(5)
    n, cw = cuda_fwd_local.STATES, cuda_fwd_local.CHANNELS
    k = torch.randn(ct, n, generator=gen, dtype=torch.float64)
    v = torch.randn(ct, cw, generator=gen, dtype=torch.float64)
    b = torch.rand(ct, cw, generator=gen, dtype=torch.float64)
    g = -0.05 * torch.rand(ct, generator=gen, dtype=torch.float64)
    after = torch.cat([g.flip(0).cumsum(0).flip(0)[1:], torch.zeros(1, dtype=torch.float64)])
    weights = after.exp()
    want_m = (v * weights[:, None]).T @ k
    want_j = (b * weights[:, None]).T @ (k * k)
    got_m, got_j = emulate(k, v, b, g)
    assert torch.allclose(got_m, want_m, rtol=1e-12, atol=1e-12)
    assert torch.allclose(got_j, want_j, rtol=1e-12, atol=1e-12)
