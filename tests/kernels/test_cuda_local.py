"""The chunk-parallel backward's local pass in CUDA C++ (``palimpsa.kernels.cuda_local``) on the CPU.

NVRTC compiles it for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin: with bf16, fp16 and
float32 inputs, and float32 values with bf16 keys, at 2.7b shapes and a small one with packed sequences, its registers
within ``__launch_bounds__`` (one 8-warp CTA an SM), no local memory, its shared memory (two 64 KB state slots, a
segment's widened inputs and its raw copies) within an H100's or H200's 227 KB a CTA, its state updates as TF32
tensor-core products (``mma.m16n8k8``: HMMA), no barrier in the token loop, ``dq``, ``dk`` added by four-state
vector atomics into a scratch that ``states_of_sums`` orders, and the reverse step in two copies (one peeling the state
of the token before: ``TSUB``); every timing probe compiles. Then the dispatch on CPU
tensors (``LOCAL`` "cuda" refuses with the reason, "auto" never takes it; auto's other rules with the reason patched
away). Its gradients are checked on a GPU against float64 and the Gluon pass (docs/bench/cuda-mma-2026-11-29).
"""

from __future__ import annotations

import functools
import os
import re

import pytest
import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import chunked_bwd, cuda_build, cuda_local
from palimpsa.kernels import fused_recurrent as fr

SHAPES = {"2.7b": (80, 1, 64, 512), "small": (8, 2, 128, 64)}  # heads, groups, head dim, chunk
DTYPES = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "f32": (torch.float32, None),
          "f32-bf16-keys": (torch.float32, torch.bfloat16)}  # values, gains, output gradients; keys, queries
LAUNCHES = [(d, s) for d in DTYPES for s in SHAPES]
IDS = [f"{d}-{s}" for d, s in LAUNCHES]
MAX_SHARED = 227 * 1024  # the most dynamic shared memory a CTA may ask for on compute capability 9.0
TF32_MMA = "HMMA.1688.F32.TF32"  # mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
BARRIER = "BAR.SYNC.DEFER_BLOCKING"


@functools.cache
def disassembly(dtype: str, shape: str, probe: int = 0) -> str:
    values, keys = DTYPES[dtype]
    return sass(cuda_local.compile_cubin(values, *SHAPES[shape], varlen=shape == "small", arch="sm_90a",
                                         probe=probe, key_dtype=keys))


def opcodes(text: str) -> list:
    return [op for _, op, _ in instructions(text)]


def addresses(text: str, opcode: str) -> list:
    return [at for at, op, _ in instructions(text) if op == opcode]


def reductions(text: str) -> list:
    """The global reductions' full opcodes (``instructions`` stops an opcode at the lowercase x of ``F32x4``)."""
    return sorted(re.findall(r"\bREDG\.\S+", text))


def assert_in_registers(text: str) -> None:
    """Within the 255 registers of one 8-warp CTA an SM, nothing on the stack, no local memory."""
    used = resources(text)
    assert used["REG"] <= 255 and used["LOCAL"] == 0 and used["STACK"] == 0, used


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_compiles_within_bounds(dtype, shape):
    """One 8-warp CTA an SM: at most 255 registers a thread and no local memory (a lane's 4 x 8 x 4 states and
    adjoints stay in registers); the state slots and a segment's inputs within 227 KB; a reciprocal a state element
    and token in each of the reverse step's two copies (2 channels x 16 states: 32 each); the state updates as TF32
    tensor-core products, 16 a ``apply`` (8 tiles of M and of J), which the code inlines 5 times (pass A's two
    sub-blocks, pass B's state before token 8, its rescaled and its plain per-token walks)."""
    text = disassembly(dtype, shape)
    assert "code for sm_90a" in text
    assert_in_registers(text)
    assert cuda_local.shared_bytes(*DTYPES[dtype]) <= MAX_SHARED
    ops = opcodes(text)
    assert ops.count("MUFU.RCP") >= 2 * 32
    assert ops.count(TF32_MMA) >= 16 * 5
    assert [op for op in ops if op.startswith("HMMA") and op != TF32_MMA] == []


def test_barriers_outside_the_token_loop():
    """The barriers are the stage's, two a segment (its copies landed and the stage's previous contents read; its
    widened inputs written and the raw buffer read), the stage inlined twice (pass A's and pass B's segment loops):
    4 in the SASS, none in the reverse step (from its 32 reciprocals to the decay gradient's atomic), whose sums over
    the channels and states stay in a warp (shuffles and atomics)."""
    text = disassembly("bf16", "2.7b")
    ops = opcodes(text)
    assert 0 < ops.count(BARRIER) <= 4
    first, last = addresses(text, "MUFU.RCP")[-32], max(at for at, op, _ in instructions(text) if op.startswith("REDG"))
    assert not [at for at in addresses(text, BARRIER) if first <= at <= last]
    assert ops.count("SHFL.BFLY") >= 2 * (8 + 4) + 4 + 5  # dq/dk per tile pair, dv/dbeta, the decay gradient


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_vector_atomics(dtype):
    """``dq`` and ``dk`` go out four states at a time (``red.global.add.v4.f32``, one a lane, tile pair and token: 2
    in each copy of the reverse step); the one scalar reduction left is the decay gradient's (one a warp and token)."""
    assert reductions(disassembly(dtype, "2.7b")) == (2 * ["REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"]
                                                      + 4 * ["REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU"])


def test_shared_memory():
    """Only the raw copies' rows depend on the dtypes: bf16 and fp16 take the same, float32 values, gains and output
    gradients 3 x 16 x 64 x 2 bytes more, float32 keys and queries 2 x 16 x 128 x 2 more; the peeled states' squared
    keys as TF32 (``TSUB`` above 0) a row of 16 x 8 x 20 floats more; and ``shared_bytes`` is the kernel's
    ``sizeof(Shared)`` with and without them (NVRTC checks a ``static_assert`` on the source's structs), within 227 KB.
    A slab holds every segment's start: ``chunk // 16`` states."""
    bf16, f32 = torch.bfloat16, torch.float32
    half, mixed, full = (cuda_local.shared_bytes(*dtypes) for dtypes in [(bf16,), (f32, bf16), (f32,)])
    assert cuda_local.shared_bytes(torch.float16) == half < mixed < full
    assert mixed - half == 3 * 16 * 64 * (4 - 2) and full - mixed == 2 * 16 * 128 * (4 - 2)
    assert cuda_local.shared_bytes(bf16, f32) - half == 2 * 16 * 128 * (4 - 2)
    structs = cuda_local.SOURCE[:cuda_local.SOURCE.index('extern "C"')]  # up to the kernel

    def compiles_as(size, values, keys, options):  # NVRTC's check that sizeof(Shared) is ``size`` under ``options``
        source = structs + f'static_assert(sizeof(Shared) == {size}, "shared_bytes");\n'
        cuda_build.compile_source(source, "shared.cu", ["--gpu-architecture=sm_90a", "-std=c++17", *options,
                                                        *cuda_local.dtype_options(values, keys)],
                                  "the shared-memory layout")

    for values, keys in [*DTYPES.values(), (bf16, f32)]:
        for tsub in (cuda_local.TSUB, 0.0):
            size = cuda_local.shared_bytes(values, keys, tsub)
            assert size <= MAX_SHARED
            compiles_as(size, values, keys, [f"-DPEEL={int(tsub > 0)}", *cuda_local.layout_options()])
        assert size == cuda_local.shared_bytes(values, keys) - 16 * 8 * 20 * 4
    assert cuda_local.slab_states(512) == 32 and cuda_local.slab_states(16) == 1
    for values, keys in DTYPES.values():  # W16: no squared keys' rows, the state halves' dv, dbeta sums of a segment
        size = cuda_local.shared_bytes(values, keys, w16=True)
        assert size == cuda_local.shared_bytes(values, keys) - 2 * 16 * 8 * 20 * 4 + 16 * 2 * 2 * (64 + 8) * 4
        compiles_as(size, values, keys, ["-DPEEL=1", "-DW16=1", *cuda_local.layout_options(512)])


def assert_one_value_kept_around_the_passes(text: str) -> None:
    """Within the registers, and at most one value on the stack: stored as a work item starts, before its first
    barrier, and read back once after its last tensor-core product (some builds keep a work item's index there)."""
    used = resources(text)
    assert used["REG"] <= 255 and used["LOCAL"] == 0 and used["STACK"] <= 8, used
    found = instructions(text)
    stores = [at for at, op, _ in found if op.startswith("STL")]
    loads = [at for at, op, _ in found if op.startswith("LDL")]
    first_barrier = min(at for at, op, _ in found if op.startswith("BAR.SYNC"))
    last_product = max(at for at, op, _ in found if op == TF32_MMA)
    assert len(stores) <= 1 and len(loads) <= 1, (stores, loads)
    assert all(at < first_barrier for at in stores) and all(at > last_product for at in loads), (stores, loads)


@pytest.mark.parametrize("probe", [2, 4, 8, 14])
def test_probes_compile(probe):
    """The timing probes (parts left out, docs/bench/cuda-mma-2026-11-29) compile within the registers, without
    local memory in the passes (probe 4 keeps one value around them, as ``assert_one_value_kept_around_the_passes``
    allows), and leave their parts out: 2 the dq/dk vector atomics, 4 (pass B's per-token walks) and 8 (pass A)
    tensor-core products."""
    text = disassembly("bf16", "2.7b", probe)
    assert_one_value_kept_around_the_passes(text)
    assert ("REDG.E.ADD.F32x4" in text) == (not probe & 2)
    assert (opcodes(text).count(TF32_MMA) < 16 * 5) == bool(probe & 12)


def test_probes_of_the_sums_and_reciprocals_compile():
    """Probe 16 keeps the ``dq``/``dk`` and decay-gradient butterflies (the default build's shuffles) and skips their
    atomics only where a sum equals 12345 (so that nothing is dead code); probe 32 takes the reverse step's reciprocals
    as multiplies (fewer than 32 reciprocals left in the kernel, against 64 and more), spilling at most a few
    bytes. Both within the registers (docs/bench/hsum-2026-11-29, call 5)."""
    default = disassembly("bf16", "2.7b")
    sums, recips = disassembly("bf16", "2.7b", 16), disassembly("bf16", "2.7b", 32)
    for text in (sums, recips):
        assert resources(text)["REG"] <= 255 and resources(text)["LOCAL"] == 0
    assert resources(sums)["STACK"] == 0 and resources(recips)["STACK"] <= 16
    assert opcodes(sums).count("SHFL.BFLY") == opcodes(default).count("SHFL.BFLY")
    assert reductions(sums) == reductions(default)
    assert opcodes(recips).count("MUFU.RCP") < 32 <= opcodes(default).count("MUFU.RCP") - 32


def test_decay_gradient_sums_in_chains():
    """``SSPLIT`` 1 (the default) sums the decay gradient's ``<dM, M> + <dI, J>`` in 4 chains of FFMAs (by term and
    channel) instead of one 64 long (``SSPLIT`` 0): 3 adds more a copy of the reverse step, within the registers and
    without local memory either way."""
    single = sass(cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], defines="SSPLIT=0"))
    default = disassembly("bf16", "2.7b")
    for text in (single, default):
        assert_in_registers(text)
    assert opcodes(default).count("FADD") >= opcodes(single).count("FADD") + 2 * 3


def test_pass_a_stages_lean():
    """``LEANA`` 1 (the default) stages pass A's segments with what its walk reads only: none of the keys' and
    queries' rows (widened from 16-bit loads), output gradients or pass B's factors, which ``LEANA`` 0 (the form
    before) also built there; within the registers and without local memory either way. (This test sees the builds'
    shape only; that pass A reads nothing the lean stage leaves out rests on the GPU checks against float64,
    docs/bench/w16-2026-11-29, calls 3 and 5.)"""
    full = sass(cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], defines="LEANA=0"))
    default = disassembly("bf16", "2.7b")
    for text in (full, default):
        assert_in_registers(text)
    assert opcodes(default).count("LDS.U16") < opcodes(full).count("LDS.U16")
    assert len(opcodes(default)) < len(opcodes(full))


@pytest.mark.parametrize("dtype", ["bf16", "f32-bf16-keys"])
def test_pass_a_states_stored_in_bulk(dtype):
    """``BULKA`` 1 (the default): pass A puts each segment's end state into a state slot, which pass B alone uses
    otherwise, and the next stage stores it into the slab as one bulk copy of the tensor memory accelerator (``UBLKCP``
    from shared to global, after the threads' proxy fence of their shared-memory writes), so that the warps do not issue
    its 64 KB; pass B reads the slab past L1 (``ld.global.cg``: the bulk copies write L2, which an earlier work item's
    lines in L1 would not see). ``BULKA`` 0, the form before, stores them with the threads' own 16-byte stores (16 a
    thread and segment besides the checkpoint's 16). Both within the registers, without local memory. (That the slab
    holds each segment's start before pass B reads it rests on the GPU checks: docs/bench/fwd-local-2026-11-29, calls 7
    and 8.)"""
    values, keys = DTYPES[dtype]
    plain = sass(cuda_local.compile_cubin(values, *SHAPES["2.7b"], key_dtype=keys, defines="BULKA=0"))
    bulk = disassembly(dtype, "2.7b")
    for text in (plain, bulk):
        assert_in_registers(text)
    assert "UBLKCP.G.S" in opcodes(bulk) and "FENCE.VIEW.ASYNC.S" in opcodes(bulk)
    assert "UBLKCP.G.S" not in opcodes(plain)
    assert opcodes(plain).count("STG.E.128") == opcodes(bulk).count("STG.E.128") + 16 == 32
    assert opcodes(bulk).count("LDG.E.128.STRONG.GPU") == opcodes(plain).count("LDG.E.128") == 16


FIXCP_LAUNCHES = [("bf16", "2.7b"), ("f32-bf16-keys", "2.7b"), ("f32", "small")]  # 16-bit, mixed, float32 keys


@pytest.mark.parametrize("dtype, shape", FIXCP_LAUNCHES, ids=[f"{d}-{s}" for d, s in FIXCP_LAUNCHES])
def test_copies_at_fixed_offsets(dtype, shape):
    """The default build (``FIXCP`` 1): each thread's copies of a segment in loops of known trip count, so that the
    SASS holds each copy once at each of the three places that ask for a segment's copies (keys and queries, values,
    gains, output gradients, log decays: 2 + 3 + 1 with 16-bit keys, 4 + 3 + 1 with float32 ones; a segment's 16
    tokens of 64 channels are 128 copies of 16 bytes in 16 bits and 256 in float32, at most one a thread) instead of
    the general loop's unrolled bodies (the timing macro ``FIXCP`` 0); within the registers, with the same products
    and barriers, and fewer instructions."""
    values, keys = DTYPES[dtype]
    fixed = disassembly(dtype, shape)
    general = sass(cuda_local.compile_cubin(values, *SHAPES[shape], varlen=shape == "small", key_dtype=keys,
                                            defines="FIXCP=0"))
    assert_in_registers(fixed)
    key_copies = 2 * (16 * 128 * (keys or values).itemsize // 16 // 256)  # keys and queries
    value_copies = 3 * max(1, 16 * 64 * values.itemsize // 16 // 256)  # values, gains, output gradients
    copies = [op for op in opcodes(fixed) if op.startswith("LDGSTS")]
    assert len(copies) == 3 * (key_copies + value_copies + 1)
    assert sum(op.startswith("LDGSTS") for op in opcodes(general)) > len(copies)
    for op in (TF32_MMA, "BAR.SYNC.DEFER_BLOCKING"):
        assert opcodes(fixed).count(op) == opcodes(general).count(op)
    assert len(opcodes(fixed)) < len(opcodes(general))


@pytest.mark.parametrize("dtype", ["bf16", "f32-bf16-keys"])
def test_dk_doubles_the_gains_once_a_token(dtype):
    """The timing macro ``K2`` 1 (off: an H200 timed it no faster, docs/bench/k2-2026-11-29): ``dk``'s
    ``2 k (dI . b)`` as ``k (dI . 2 b)``, the gains doubled once a token instead of every state's key (the same bits:
    doubling is exact), so each of the reverse step's two copies loses the 16 additions (``k + k``) a token and lane
    for 2 multiplies: 30 fewer ``FADD`` in the kernel, the same products, reciprocals and multiplies; within the
    registers, in 16-bit and mixed builds (float32 keys spill a few values outside the token loop)."""
    values, keys = DTYPES[dtype]
    folded = sass(cuda_local.compile_cubin(values, *SHAPES["2.7b"], key_dtype=keys, defines="K2=1"))
    plain = disassembly(dtype, "2.7b")
    assert_in_registers(folded)
    for op in (TF32_MMA, "MUFU.RCP", "FMUL", "FFMA", BARRIER):
        assert opcodes(folded).count(op) == opcodes(plain).count(op), op
    assert opcodes(plain).count("FADD") - opcodes(folded).count("FADD") == 30
    assert len(opcodes(folded)) < len(opcodes(plain))


def test_slab_store_probes_need_the_threads_own_stores():
    """Probes 64 and 128 (pass A's slab stores into one slot, or none) time the threads' own stores, so they build
    with ``BULKA`` 0 only; under the default the source refuses them instead of timing the default build."""
    with pytest.raises(cuda_build.CompileError, match="build them with BULKA=0"):
        cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], probe=64)
    for probe in (64, 128):
        used = resources(sass(cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], probe=probe,
                                                       defines="BULKA=0")))
        assert used["REG"] <= 255 and used["LOCAL"] == 0, used


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_sixteen_warps_compile(dtype, shape):
    """The timing macro ``W16`` (16 warps of 8 channels x 64 states, 512 threads; 10-13% slower on an H200) compiles
    within 128 registers a thread (the register file of one CTA an SM), its reverse step free of local memory (a few
    values of the segments' code spill to the stack): 16 reciprocals in each of its two copies, one ``dq``/``dk``
    vector atomic in each (one tile pair a warp), the decay gradient's atomic, and no global store of ``dv``,
    ``dbeta`` there (they go through shared memory, written a segment at a time); 8 tensor-core products an
    ``apply``; the shared memory within 227 KB. A build whose threads do not match ``W16`` does not compile."""
    values, keys = DTYPES[dtype]
    text = sass(cuda_local.compile_cubin(values, *SHAPES[shape], varlen=shape == "small", key_dtype=keys,
                                         defines="W16=1"))
    used = resources(text)
    assert used["REG"] <= 128 and used["LOCAL"] == 0 and used["STACK"] < 256, used
    assert cuda_local.shared_bytes(values, keys, w16=True) <= MAX_SHARED
    found = instructions(text)
    products = max(at for at, op, _ in found if op == TF32_MMA)  # the reverse step's copies follow the last
    first = min(at for at, op, _ in found if op == "MUFU.RCP" and at > products)
    last = max(at for at, op, _ in found if op.startswith("REDG"))
    hot = [op for at, op, _ in found if first <= at <= last]
    assert not [op for op in hot if op.startswith(("LDL", "STL"))]
    assert hot.count("MUFU.RCP") == 32 and not [op for op in hot if op.startswith("STG")]
    assert reductions(text) == 2 * ["REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"] + 2 * ["REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU"]
    assert opcodes(text).count(TF32_MMA) >= 8 * 5
    source = cuda_local.SOURCE
    options = ["--gpu-architecture=sm_90a", "-std=c++17", "-DW16=1", *cuda_local.layout_options(),
               *cuda_local.dtype_options(values, keys), "-DH=8", "-DG=1", "-DP=64", "-DCT=64"]
    with pytest.raises(cuda_build.CompileError, match="W16 takes 512 threads"):
        cuda_build.compile_source(source, "w16.cu", options, "the local pass")


def test_peeling_takes_a_copy_of_the_reverse_step():
    """With ``TSUB`` 0 (``CUDA_TSUB``: no peeled states, every token's state from a product) the reverse step has one
    copy (32 reciprocals, 2 vector atomics); by default two, the second subtracting the token's term from its state
    (64 and 4), both within the registers without local memory. Since pass A's stages are lean (``LEANA``), the build
    without peeling keeps 8 bytes on the stack: one value stored as a work item starts, before its first barrier, and
    read back once after its last product (none with ``LEANA`` 0). Thresholds outside 0 to ``TAU`` are refused (past
    ``TAU`` a peeled state's rounding errors grow by more than the rescaled sub-blocks allow: ``test_emulation``)."""
    plain = sass(cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], tsub=0))
    assert_one_value_kept_around_the_passes(plain)
    assert 32 <= opcodes(plain).count("MUFU.RCP") < 64 <= opcodes(disassembly("bf16", "2.7b")).count("MUFU.RCP")
    assert reductions(plain).count("REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU") == 2
    for tsub in (-1.0, cuda_local.TAU + 1):
        with pytest.raises(ValueError, match=f"CUDA_TSUB {tsub}: a log decay from 0"):
            cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], tsub=tsub)


def test_compile_error():
    """An architecture NVRTC does not know raises its log as a ``CompileError``."""
    with pytest.raises(cuda_build.CompileError, match="NVRTC could not compile the local pass"):
        cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], arch="sm_1")


def scratch_sources(order) -> tuple:
    """``order`` (``states_of_sums``) applied to a scratch whose entries hold their own index: each
    output's scratch index within its token and group, and the output's ``state`` and ``dq``/``dk`` positions, after
    checking that every output stays in its own token and group."""
    tokens, groups = 3, 2
    sums = torch.arange(tokens * groups * 256, dtype=torch.float32).view(tokens, groups, 256)
    out = order(sums)
    assert out.shape == (tokens, groups, 128, 2)
    source = out.long()
    token, rest = source // (groups * 256), source % (groups * 256)
    at = torch.meshgrid(*(torch.arange(n) for n in out.shape), indexing="ij")
    assert torch.equal(token, at[0]) and torch.equal(rest // 256, at[1])
    return rest % 256, at[2], at[3]


def test_states_of_sums():
    """The scratch's ``[tokens, groups, 256]`` in the kernel's order (tile pair ``p``, row group ``g``, lane ``t``,
    ``h``, then ``dq``, ``dk``: where lane ``(g, t)`` adds its four-state vector of tile ``4 p + t``) lands on state
    ``16 (4 p + t) + 8 h + g``: each entry of the scratch holds its own index, which every output's position must
    match."""
    index, state, which = scratch_sources(cuda_local.states_of_sums)
    p, g, t, h, x = index // 128, index // 16 % 8, index // 4 % 4, index // 2 % 2, index % 2
    assert torch.equal(x, which) and torch.equal(16 * (4 * p + t) + 8 * h + g, state)


def test_timing_macros():
    """``CUDA_DEFINES`` reaches the source as its timing macros (a name alone meaning 1); any other name is refused,
    ``PEEL`` and ``TSUB`` too, since ``CUDA_TSUB`` sets them and the shared memory with them."""
    assert cuda_local.timing_macros("") == {}
    assert cuda_local.timing_macros("FAC=0+SLABCP") == {"FAC": "0", "SLABCP": "1"}
    for bad in ("PEEL=0", "TSUB=8.0f", "SLABCP=1+HSUM=1"):
        with pytest.raises(ValueError,
                           match="is not one of the timing macros BULKA, FAC, FIXCP, K2, LEANA, SLABCP, SSPLIT, W16 "):
            cuda_local.timing_macros(bad)
    assert cuda_local.wide("W16") and cuda_local.wide("FAC=0+W16=1")
    assert not cuda_local.wide("") and not cuda_local.wide("W16=0") and not cuda_local.wide("SSPLIT=0")


@pytest.mark.parametrize("defines, threads", [("", 256), ("W16=1", 512)])
def test_launch_takes_the_threads_and_shared_memory_of_its_build(monkeypatch, defines, threads):
    """The launch asks for 512 threads and ``W16``'s shared memory where ``defines`` names ``W16``, else 256 and
    the default's (the kernel, grid and driver call stubbed: the launch's own arithmetic on the CPU)."""
    seen = {}
    monkeypatch.setattr(cuda_local, "_kernel", lambda *args: seen.setdefault("kernel", args))
    monkeypatch.setattr(cuda_local, "programs", lambda device, n_work: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda_build, "launch", lambda func, device, grid, threads, shared, tensors, ints:
                        seen.update(threads=threads, shared=shared))
    v = torch.zeros(1, 32, 2, 64)
    k = torch.zeros(1, 32, 1, 128)
    grads = [torch.zeros_like(t) for t in (v, k, k, v[..., 0])]
    cuda_local.launch(v, k, k, v[..., 0], v, torch.ones(1), None, None, v, None, None, grads[0], grads[1], grads[2],
                      grads[3], torch.zeros_like(v), None, None, None, None, 1, 1, 32, defines=defines)
    assert seen["threads"] == threads
    assert seen["shared"] == cuda_local.shared_bytes(torch.float32, torch.float32, cuda_local.TSUB, threads == 512)
    assert seen["kernel"][-1] == defines


def test_config_reaches_the_launch(monkeypatch):
    """``chunked_bwd`` passes the config's ``CUDA_TSUB``, ``CUDA_DEFINES`` and ``CUDA_PROBE`` to the launch, and the
    defaults where the config has none."""
    seen = []
    monkeypatch.setattr(cuda_local, "launch", lambda *args, **kwargs: seen.append(kwargs))
    args = [None] * 11 + [(None,) * 7] + [None, None, 1, 1, 512]
    assert chunked_bwd._cuda_local({"LOCAL": "cuda", "CUDA_TSUB": 4.0, "CUDA_DEFINES": "FAC=0", "CUDA_PROBE": 2},
                                   *args)
    assert chunked_bwd._cuda_local({"LOCAL": "cuda"}, *args)
    assert seen == [{"probe": 2, "tsub": 4.0, "defines": "FAC=0"}, {"probe": 0, "tsub": None, "defines": ""}]


def cpu_inputs(dtype=torch.bfloat16, head_dim=64, key_dtype=None):
    v = torch.zeros(1, 32, 2, head_dim, dtype=dtype)
    k = torch.zeros(1, 32, 1, 128, dtype=key_dtype or dtype)
    return v, k, k.clone(), torch.zeros_like(v), torch.zeros(1, 32, 2), torch.zeros_like(v)


def test_unsupported_reasons():
    """What the pass refuses, named: here every CPU tensor (the first test; the dtype and TF32 reasons come after it
    and need CUDA tensors)."""
    for dtype, keys in DTYPES.values():
        v, k, q, beta, g, dy = cpu_inputs(dtype, key_dtype=keys)
        assert cuda_local.unsupported(v, k, q, beta, g, dy, None, 512) == "not a CUDA tensor"


def test_dispatch_on_cpu():
    """``LOCAL`` "cuda" asks for the pass and refuses, with the reason, where it cannot run; "auto" does not take it
    on CPU tensors, nor do "gluon" and "triton" ever; the pass is one of ``chunked_bwd.LOCALS``."""
    v, k, q, beta, g, dy = cpu_inputs()
    assert "cuda" in chunked_bwd.LOCALS and "cuda" in chunked_bwd.LOCAL_RUNS
    with pytest.raises(ValueError, match=r"CUDA local pass cannot run here \(not a CUDA tensor\)"):
        chunked_bwd._cuda_plan({"LOCAL": "cuda"}, {}, v, k, q, beta, g, dy, None, 512, 10**4)
    for local in ("auto", "gluon", "triton"):
        assert chunked_bwd._cuda_plan({"LOCAL": local}, {}, v, k, q, beta, g, dy, None, 512, 10**4) is False


def test_auto_rules(monkeypatch):
    """With the pass's own reasons patched away (``unsupported`` None, 132 SMs), "auto" takes it only where its work
    items number ``AUTO_CUDA_ROUNDS`` an SM, the keys come in the values' dtype or in 16 bits beside float32 values
    (fine-tuning's mix; other mixes only under "cuda"), it has not failed in this process
    (``CUDA_LOCAL_FAILED``), and no Gluon or Triton pass key (in the call's config or ``CHUNKED_CONFIG``) or occupancy
    preset is set; "cuda" takes it regardless."""
    monkeypatch.setattr(cuda_local, "unsupported", lambda *args: None)
    monkeypatch.setattr(fr, "_sm_count", lambda device: 132)
    monkeypatch.setattr(chunked_bwd, "CUDA_LOCAL_FAILED", None)
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV, raising=False)
    low, high = chunked_bwd.AUTO_CUDA_ROUNDS
    inputs = cpu_inputs()

    def plan(bwd_config=None, n_work=132 * low, local="auto", args=inputs):
        v, k, q, beta, g, dy = args
        return chunked_bwd._cuda_plan({"LOCAL": local}, bwd_config or {}, v, k, q, beta, g, dy, None, 512, n_work)

    assert plan() is True and plan(n_work=132 * high) is True
    assert plan(n_work=132 * low - 1) is False and plan(n_work=132 * high + 1) is False
    assert plan(args=cpu_inputs(torch.float32, key_dtype=torch.bfloat16)) is True  # fine-tuning's mixed dtypes
    assert plan(args=cpu_inputs(torch.float32, key_dtype=torch.float16)) is True
    assert plan(args=cpu_inputs(torch.bfloat16, key_dtype=torch.float32)) is False  # no GPU has run these mixes
    assert plan(args=cpu_inputs(torch.float16, key_dtype=torch.bfloat16)) is False
    assert plan(args=cpu_inputs(torch.bfloat16, key_dtype=torch.float32), local="cuda") is True
    assert plan({"SEG": 2}) is False and plan({"num_warps": 1}) is False
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "SEG", 2)  # a Gluon pass key changed in the module's config
    assert plan() is False
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "SEG", chunked_bwd._SHIPPED["SEG"])
    assert plan() is True
    monkeypatch.setenv(chunked_bwd.PROGRAMS_ENV, "12")
    assert plan() is False
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV)
    monkeypatch.setattr(chunked_bwd, "CUDA_LOCAL_FAILED", "CompileError: earlier")
    assert plan() is False and plan(local="cuda") is True


def test_launch_refuses_arguments_past_int32():
    """A kernel's int arguments go through ``ctypes.c_int``, which would wrap silently: one past 2^31 is an error."""
    with pytest.raises(ValueError, match="does not fit a 32-bit int"):
        cuda_build.launch(None, torch.device("cpu"), (1, 1, 1), 32, 0, [], [1, 2**31])


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_packed_sequences_launch_the_longest_sequences_chunks(monkeypatch):
    """With packed sequences the pass numbers its work items by sequence and chunk, so it is launched with the longest
    sequence's chunks (3 here), not the whole batch's (4), which would number n_states times too many items; the
    carry and the corrections run after it."""
    from palimpsa.kernels import fused_recurrent
    from scan_inputs import make_inputs

    launches = []
    monkeypatch.setattr(cuda_local, "unsupported", lambda *args: None)
    monkeypatch.setattr(cuda_local, "launch", lambda *args, **kw: launches.append(args))
    inputs = make_inputs(1, 20, 2, 1, 4, 16, requires_grad=True, device="cpu")
    cu_seqlens = torch.tensor([0, 3, 20], dtype=torch.int32)  # 1 and 3 chunks of 8 tokens
    before = dict(chunked_bwd.LOCAL_RUNS)
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False,
        cu_seqlens, fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
        bwd_config={"kernel": "chunked", "LOCAL": "cuda"}, chunk_size=8, block_size=4)
    y.sum().backward()
    assert len(launches) == 1
    n_states, max_chunks, chunk_size = launches[0][-3:]
    assert (n_states, max_chunks, chunk_size) == (2, 3, 8)
    assert chunked_bwd.local_runs_since(before) == {"cuda": 1}
