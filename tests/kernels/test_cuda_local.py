"""The chunk-parallel backward's local pass in CUDA C++ (``palimpsa.kernels.cuda_local``) on the CPU.

NVRTC compiles it for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin: in bf16 and fp16, at
2.7b shapes and a small one with packed sequences, its registers within ``__launch_bounds__`` (one 8-warp CTA an
SM), no local memory, its shared memory within an H100's or H200's 227 KB a CTA, no barrier in the token loop, and
``dq``, ``dk`` added by two-state vector atomics; every timing probe compiles. Then the dispatch on CPU tensors
(``LOCAL`` "cuda" refuses with the reason, "auto" never takes it). Its gradients are checked on a GPU against
float64 and the Gluon pass (docs/bench/cuda-local-2026-11-29, ``check_local.py``).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import chunked_bwd, cuda_build, cuda_local

SHAPES = {"2.7b": (80, 1, 64, 512), "small": (8, 2, 128, 64)}  # heads, groups, head dim, chunk
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LAUNCHES = [(d, s) for d in DTYPES for s in SHAPES]
IDS = [f"{d}-{s}" for d, s in LAUNCHES]
MAX_SHARED = 227 * 1024  # the most dynamic shared memory a CTA may ask for on compute capability 9.0


@functools.cache
def disassembly(dtype: str, shape: str, probe: int = 0, vector_atomics: bool = True) -> str:
    return sass(cuda_local.compile_cubin(DTYPES[dtype], *SHAPES[shape], varlen=shape == "small", arch="sm_90a",
                                         probe=probe, vector_atomics=vector_atomics))


def opcodes(text: str) -> list:
    return [op for _, op, _ in instructions(text)]


@pytest.mark.parametrize("dtype, shape", LAUNCHES, ids=IDS)
def test_compiles_within_bounds(dtype, shape):
    """One 8-warp CTA an SM: at most 255 registers a thread and no local memory (the 4 x 32 states and adjoints a lane
    stay in registers); the state slots and a segment's inputs within 227 KB; a reciprocal a state element and token
    in the reverse step (2 channels x 16 states: 32)."""
    text = disassembly(dtype, shape)
    assert "code for sm_90a" in text
    used = resources(text)
    assert used["REG"] <= 255 and used["LOCAL"] == 0 and used["STACK"] == 0, used
    assert cuda_local.shared_bytes() <= MAX_SHARED
    assert opcodes(text).count("MUFU.RCP") >= 32


def test_barriers_outside_the_token_loop():
    """The barriers are the stage's (four a segment: copies done, 16-bit rows read, widened rows written, and before
    the next copies) and one a work item, nine in the code: none in the reverse step, whose sums over the channels
    and states stay in a warp (shuffles and atomics)."""
    ops = opcodes(disassembly("bf16", "2.7b"))
    assert ops.count("BAR.SYNC.DEFER_BLOCKING") <= 9
    assert ops.count("SHFL.BFLY") >= 4 * 6 + 4 + 5  # dq/dk per group of 4 states, dv/dbeta, the decay gradient


def test_vector_atomics():
    """``dq`` and ``dk`` go out two states at a time (``red.global.add.v2.f32``: 4 a token and lane instead of 8);
    ``vector_atomics=False`` compiles the one-state form."""
    vector = disassembly("bf16", "2.7b")
    scalar = disassembly("bf16", "2.7b", vector_atomics=False)
    assert vector.count("REDG.E.ADD.F32x2") == 4 and "REDG.E.ADD.F32x2" not in scalar
    assert scalar.count("REDG.E.ADD.F32.") == vector.count("REDG.E.ADD.F32.") + 8


def test_shared_memory():
    """Three 64 KB state slots, and a segment's keys, squared keys, values and gains in float32, queries and output
    gradients in 16 bits, and its log decays."""
    assert cuda_local.shared_bytes() == 3 * 65536 + 16 * (2 * 128 + 2 * 64) * 4 + 16 * (128 + 64) * 2 + 16 * 4
    assert cuda_local.slab_states(512) == 31 and cuda_local.slab_states(16) == 1


@pytest.mark.parametrize("probe", [2, 4, 8, 14])
def test_probes_compile(probe):
    """The timing probes (parts left out, docs/bench/cuda-local-2026-11-29) compile."""
    assert resources(disassembly("bf16", "2.7b", probe))["REG"] <= 255


def test_compile_error():
    """An architecture NVRTC does not know raises its log as a ``CompileError``."""
    with pytest.raises(cuda_build.CompileError, match="NVRTC could not compile the local pass"):
        cuda_local.compile_cubin(torch.bfloat16, *SHAPES["2.7b"], arch="sm_1")


def cpu_inputs(dtype=torch.bfloat16, head_dim=64):
    v = torch.zeros(1, 32, 2, head_dim, dtype=dtype)
    k = torch.zeros(1, 32, 1, 128, dtype=dtype)
    return v, k, k.clone(), torch.zeros_like(v), torch.zeros(1, 32, 2), torch.zeros_like(v)


def test_unsupported_reasons():
    """What the pass refuses, named: here every CPU tensor (the first test)."""
    v, k, q, beta, g, dy = cpu_inputs()
    assert cuda_local.unsupported(v, k, q, beta, g, dy, None, 512) == "not a CUDA tensor"


def test_dispatch_on_cpu():
    """``LOCAL`` "cuda" asks for the pass and refuses, with the reason, where it cannot run; "auto" and the others
    never take it (it measured slower than the Gluon pass); the pass is one of ``chunked_bwd.LOCALS``."""
    v, k, q, beta, g, dy = cpu_inputs()
    assert "cuda" in chunked_bwd.LOCALS and "cuda" in chunked_bwd.LOCAL_RUNS
    with pytest.raises(ValueError, match=r"CUDA local pass cannot run here \(not a CUDA tensor\)"):
        chunked_bwd._cuda_plan({"LOCAL": "cuda"}, v, k, q, beta, g, dy, None, 512)
    for local in ("auto", "gluon", "triton"):
        assert chunked_bwd._cuda_plan({"LOCAL": local}, v, k, q, beta, g, dy, None, 512) is False


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
