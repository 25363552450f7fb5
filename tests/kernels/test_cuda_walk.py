"""The chunk walk in CUDA C++ (``palimpsa.kernels.cuda_walk``) on the CPU.

NVRTC compiles the kernel for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin, so here, in
bf16, fp16 and float32, at 2.7b shapes and a small one, with and without packed sequences and the final state: its
registers within ``__launch_bounds__`` (two 8-warp CTAs an SM), no local memory, and its token loop (two tokens an
iteration) without spills, with the channel-shared reciprocals compiled in and within its instruction count a
token. Then the dispatch on CPU tensors (``unsupported``, ``mode``, ``wanted``: ``auto`` only for the bf16, fp16 and
float32 inputs with head dimensions a multiple of 64 or 32 that ran on a GPU, ``walk_CUDA=1`` for all it takes), the
CTA's channels and shared memory, a failed compile's error, and what the chunked forward does when the walk fails
(under the interpreter: out of memory raises, a failed compile or load turns the walk off for the process, a failed
launch only for its call). Its outputs are checked on a GPU against float64 and the Triton walk
(docs/bench/nvrtc-walk-2026-11-28).
"""

from __future__ import annotations

import functools
import os
import re

import pytest
import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import cuda_build, cuda_walk

SHAPES = {  # heads, groups, head dim, chunk
    "2.7b": (80, 1, 64, 512),  # 64 channels a CTA: 8 warps, MINB 2
    "small": (8, 2, 32, 64),  # 32 channels a CTA: 4 warps, MINB 4
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LAUNCHES = [(dtype, shape, varlen) for dtype in DTYPES for shape in SHAPES for varlen in (False, True)]
LAUNCH_IDS = [f"{d}-{s}{'-varlen-final' if v else ''}" for d, s, v in LAUNCHES]

# 65536 registers an SM over MAX_WARPS (16) warps of 32 lanes: two 8-warp CTAs, or four 4-warp ones
REGISTERS = 128
# the token loop's path without renormalisation, two tokens an iteration (NVRTC 12.8.93): 248 instructions a token
# in bf16 and fp16 (249.5 at the small shape), 243.5 in float32 (245 at the small shape with the final state);
# the Triton walk runs 321
INSTRUCTIONS_PER_TOKEN = 256
# 32 reciprocals a token and lane, 8 of them saved by sharing one between two channels on PAIR_GROUPS = 2 of 4
# groups of states, and one ex2 (the scale): 25 MUFU a token measured in every launch (33 without the sharing)
MUFU_PER_TOKEN = 25
FFMA_PER_TOKEN = 96  # at least: 64 state updates and 32 readout products a token and lane (measured 128)


@functools.cache
def disassembly(dtype: str, shape: str, varlen: bool, pair_groups: int = cuda_walk.PAIR_GROUPS) -> str:
    """``cuobjdump -sass -res-usage`` of the walk compiled for sm_90a (once per launch in this process)."""
    return sass(cuda_walk.compile_cubin(DTYPES[dtype], *SHAPES[shape], varlen=varlen, store_final=varlen,
                                        arch="sm_90a", pair_groups=pair_groups))


def branch_target(op: str, operands: str) -> int | None:
    m = re.search(r"0x([0-9a-f]+)", operands)
    return int(m.group(1), 16) if op.startswith("BRA") and m else None


def token_loop(text: str) -> tuple[list, list]:
    """The token loop, the innermost backward branch's loop with the work of two tokens (at least
    2 x ``FFMA_PER_TOKEN`` FFMAs): its opcodes, all of them and those on the path without the renormalisation
    (forward branches taken)."""
    ins = instructions(text)
    index = {address: n for n, (address, _, _) in enumerate(ins)}
    loops = []
    for n, (address, op, operands) in enumerate(ins):
        target = branch_target(op, operands)
        if target is not None and target < address and target in index:
            loops.append((index[target], n))
    two_tokens = [(start, end) for start, end in loops
                  if sum(ins[n][1].startswith("FFMA") for n in range(start, end + 1)) >= 2 * FFMA_PER_TOKEN]
    assert two_tokens, f"no loop with {2 * FFMA_PER_TOKEN} FFMAs among the {len(loops)} loops"
    start, end = min(two_tokens, key=lambda loop: loop[1] - loop[0])
    whole = [ins[n][1].split(".")[0] for n in range(start, end + 1)]
    path, n = [], start
    while n <= end:
        address, op, operands = ins[n]
        path.append(op.split(".")[0])
        target = branch_target(op, operands)
        if target is not None and target > address and n != end:
            n = index[target]  # a forward branch: the renormalisation skipped
            continue
        n += 1
    return whole, path


def test_nvrtc_found():
    """The compile tests need libnvrtc: CI installs the ``nvidia-cuda-nvrtc-cu12`` wheel (the test extra), so its
    absence fails here instead of skipping every compile test."""
    assert cuda_walk.nvrtc() is not None, "no libnvrtc: pip install nvidia-cuda-nvrtc-cu12 (pip install -e .[test])"


@pytest.mark.parametrize("dtype, shape, varlen", LAUNCHES, ids=LAUNCH_IDS)
def test_registers_within_launch_bounds(dtype, shape, varlen):
    """The kernel compiles for sm_90a within its ``__launch_bounds__``' registers (``MAX_WARPS`` warps an SM), with
    no local memory: more would cost the second CTA an SM the walk's latency hiding relies on."""
    text = disassembly(dtype, shape, varlen)
    assert "code for sm_90a" in text
    used = resources(text)
    assert used["REG"] <= REGISTERS, used
    assert used["LOCAL"] == 0, used


@pytest.mark.parametrize("dtype, shape, varlen", LAUNCHES, ids=LAUNCH_IDS)
def test_token_loop(dtype, shape, varlen):
    """The token loop (two tokens an iteration) spills nothing (the 4 x 16 states a lane stay in registers; the
    few stack slots ptxas takes, 8-48 bytes, lie outside it), keeps 25 MUFU a token (the reciprocal shared between
    a lane's two channels on two of its four groups of states) and at most ``INSTRUCTIONS_PER_TOKEN`` instructions
    a token where it does not renormalise."""
    whole, path = token_loop(disassembly(dtype, shape, varlen))
    assert "LDL" not in whole and "STL" not in whole, "local memory in the token loop (spills)"
    assert path.count("FFMA") >= 2 * FFMA_PER_TOKEN
    assert path.count("MUFU") <= 2 * MUFU_PER_TOKEN, f"{path.count('MUFU')} MUFU in two tokens"
    assert len(path) <= 2 * INSTRUCTIONS_PER_TOKEN, f"{len(path) / 2} instructions a token"


def test_token_loop_counts_the_reciprocals():
    """Without the shared reciprocals (``pair_groups=0``) the same count finds 33 MUFU a token: the bound above
    tells the sharing apart."""
    _, path = token_loop(disassembly("bf16", "2.7b", False, pair_groups=0))
    assert path.count("MUFU") == 2 * 33
    _, shared = token_loop(disassembly("bf16", "2.7b", False))
    assert shared.count("MUFU") < path.count("MUFU")


def test_compile_error(monkeypatch):
    """A source NVRTC rejects raises with its log; so does an architecture it does not know."""
    monkeypatch.setattr(cuda_walk, "SOURCE", 'extern "C" __global__ void palimpsa_walk_cuda() { undefined; }')
    with pytest.raises(RuntimeError, match="NVRTC could not compile") as error:
        cuda_walk.compile_cubin(torch.bfloat16, *SHAPES["small"])
    assert "undefined" in str(error.value)
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match=r"NVRTC could not compile the walk \(sm_1\)"):
        cuda_walk.compile_cubin(torch.bfloat16, *SHAPES["small"], arch="sm_1")


def cpu_inputs(dtype=torch.bfloat16, head_dim=64, states=128, with_beta=True):
    v = torch.zeros(1, 4, 2, head_dim, dtype=dtype)
    k = torch.zeros(1, 4, 1, states)
    return v, k, torch.zeros_like(v) if with_beta else None


@pytest.mark.parametrize("dtype, head_dim, states, with_beta, uncertainty", [
    (torch.bfloat16, 64, 128, True, False),
    (torch.float64, 64, 128, True, False),  # a dtype it does not take: still the device first
    (torch.float32, 12, 64, False, True),  # nothing it takes
])
def test_unsupported_on_the_cpu(dtype, head_dim, states, with_beta, uncertainty):
    """CPU tensors are the first reason, before any other and before asking for a device's compute capability."""
    v, k, beta = cpu_inputs(dtype, head_dim, states, with_beta)
    assert cuda_walk.unsupported(v, k, beta, uncertainty) == "not a CUDA tensor"


@pytest.mark.parametrize("value, want", [
    ("auto", "auto"), ("AUTO", "auto"), (0, "off"), (1, "on"), ("0", "off"), ("1", "on"), ("off", "off"),
    ("on", "on"), ("false", "off"), ("true", "on"), ("no", "off"), ("yes", "on"), (False, "off"), (True, "on"),
    (None, "auto"),
])
def test_mode(value, want, monkeypatch):
    """``walk_CUDA`` parses as auto, on or off (None as unset: auto without the environment variable)."""
    monkeypatch.delenv(cuda_walk.ENV, raising=False)
    assert cuda_walk.mode({"walk_CUDA": value}) == want


@pytest.mark.parametrize("value", ["maybe", 2, "", "cuda"])
def test_mode_rejects_junk(value, monkeypatch):
    """Anything else is an error, from the config or the environment."""
    monkeypatch.delenv(cuda_walk.ENV, raising=False)
    with pytest.raises(ValueError, match="must be auto, 0 or 1"):
        cuda_walk.mode({"walk_CUDA": value})
    monkeypatch.setenv(cuda_walk.ENV, str(value))
    with pytest.raises(ValueError, match="must be auto, 0 or 1"):
        cuda_walk.mode({})


def test_mode_environment(monkeypatch):
    """``PALIMPSA_CUDA_WALK`` counts where the config has no ``walk_CUDA``; the config's key wins over it; auto
    where neither is set."""
    monkeypatch.delenv(cuda_walk.ENV, raising=False)
    assert cuda_walk.mode({}) == "auto"
    assert cuda_walk.mode({"walk_BV": 2}) == "auto"
    for value, want in (("0", "off"), ("1", "on"), ("auto", "auto"), ("off", "off")):
        monkeypatch.setenv(cuda_walk.ENV, value)
        assert cuda_walk.mode({}) == want
    monkeypatch.setenv(cuda_walk.ENV, "1")
    assert cuda_walk.mode({"walk_CUDA": 0}) == "off"
    assert cuda_walk.mode({"walk_CUDA": "auto"}) == "auto"
    assert cuda_walk.mode({"walk_CUDA": None}) == "on"  # None leaves it to the environment


@pytest.mark.parametrize("config, env", [
    ({}, None), ({"walk_CUDA": "auto"}, None), ({"walk_CUDA": 0}, None), ({"walk_CUDA": "off"}, "1"),
    ({}, "0"), ({}, "auto"), ({"walk_BV": 2}, None), ({"walk_CUDA": "auto"}, "1"),
])
def test_not_wanted_on_the_cpu(config, env, monkeypatch):
    """CPU tensors go to the Triton walk under auto and off (the config's or the environment's)."""
    if env is None:
        monkeypatch.delenv(cuda_walk.ENV, raising=False)
    else:
        monkeypatch.setenv(cuda_walk.ENV, env)
    v, k, beta = cpu_inputs()
    assert cuda_walk.wanted(v, k, beta, False, config) is False


@pytest.mark.parametrize("config, env", [({"walk_CUDA": 1}, None), ({"walk_CUDA": "on"}, "0"), ({}, "1")])
def test_wanted_on_raises_on_the_cpu(config, env, monkeypatch):
    """``walk_CUDA=1`` (or ``PALIMPSA_CUDA_WALK=1`` without the key) where the walk cannot run is an error naming
    the reason, never a silent fallback."""
    if env is None:
        monkeypatch.delenv(cuda_walk.ENV, raising=False)
    else:
        monkeypatch.setenv(cuda_walk.ENV, env)
    v, k, beta = cpu_inputs()
    with pytest.raises(ValueError, match="cannot run here \\(not a CUDA tensor\\)"):
        cuda_walk.wanted(v, k, beta, False, config)


@pytest.fixture
def on_hopper(monkeypatch):
    """CPU tensors that ``wanted`` takes for a Hopper GPU's: nothing ``unsupported``, compute capability 9.0, no
    failure recorded (``unsupported`` itself is checked on a GPU)."""
    monkeypatch.delenv(cuda_walk.ENV, raising=False)
    monkeypatch.setattr(cuda_walk, "unsupported", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_walk, "FAILED", None)


@pytest.mark.parametrize("dtype, head_dim, want", [
    ("bf16", 64, True), ("fp32", 64, True), ("bf16", 128, True), ("fp32", 256, True),
    ("fp16", 64, True), ("fp16", 128, True), ("bf16", 32, True), ("fp32", 32, True),
    # what the kernel runs but no GPU check did
    ("fp32", 8, False), ("bf16", 40, False), ("fp16", 16, False),
])
def test_auto_takes_what_ran_on_a_gpu(dtype, head_dim, want, on_hopper, monkeypatch):
    """``auto`` takes bf16, fp16 and float32 with a head dimension a multiple of 64 or 32 itself, the inputs of the
    GPU checks; other head dimensions below 64 only under ``walk_CUDA=1`` (or ``PALIMPSA_CUDA_WALK=1``). Under
    ``auto`` a compute capability other than 9.x and a failed compile or load keep the Triton walk."""
    v, k, beta = cpu_inputs(DTYPES[dtype], head_dim)
    assert cuda_walk.wanted(v, k, beta, False, {}) is want
    assert cuda_walk.wanted(v, k, beta, False, {"walk_CUDA": None}) is want
    assert cuda_walk.wanted(v, k, beta, False, {"walk_CUDA": 1}) is True
    monkeypatch.setenv(cuda_walk.ENV, "1")
    assert cuda_walk.wanted(v, k, beta, False, {}) is True
    assert cuda_walk.wanted(v, k, beta, False, {"walk_CUDA": "auto"}) is want
    monkeypatch.delenv(cuda_walk.ENV)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert cuda_walk.wanted(v, k, beta, False, {}) is False
    assert cuda_walk.wanted(v, k, beta, False, {"walk_CUDA": 1}) is True
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(cuda_walk, "FAILED", "NVRTC could not compile the walk")
    assert cuda_walk.wanted(v, k, beta, False, {}) is False


@pytest.mark.parametrize("config, env", [
    ({"walk_CUDA": 1, "walk_BV": 2}, None), ({"walk_CUDA": "on", "walk_SCATTER": 0}, "0"), ({"walk_BV": 0}, "1"),
])
def test_on_with_the_triton_walks_keys_raises(config, env, on_hopper, monkeypatch):
    """``walk_CUDA=1`` (or ``PALIMPSA_CUDA_WALK=1``) with a key of the Triton walk's tiling, which the CUDA walk
    would ignore, is an error naming the key, before the device is looked at; under ``auto`` the key keeps the
    Triton walk."""
    if env is not None:
        monkeypatch.setenv(cuda_walk.ENV, env)
    v, k, beta = cpu_inputs()
    key = next(key for key in config if key != "walk_CUDA")
    with pytest.raises(ValueError, match=f"ignores the Triton walk's keys {key}"):
        cuda_walk.wanted(v, k, beta, False, config)
    monkeypatch.setattr(cuda_walk, "unsupported", lambda *args: "not a CUDA tensor")
    with pytest.raises(ValueError, match=f"ignores the Triton walk's keys {key}"):
        cuda_walk.wanted(v, k, beta, False, config)
    assert cuda_walk.wanted(v, k, beta, False, {**config, "walk_CUDA": "auto"}) is False


@pytest.mark.parametrize("error, mode, raises, failed", [
    (torch.OutOfMemoryError("CUDA out of memory"), "auto", True, False),  # memory: the Triton walk needs it too
    (cuda_build.CompileError("NVRTC could not compile the walk (sm_90a): error"), "auto", False, True),
    (cuda_build.LoadError("cuModuleLoadData failed with CUDA error 218"), "auto", False, True),
    (OSError("libnvrtc.so.12: cannot open shared object file"), "auto", False, True),
    (RuntimeError("cuLaunchKernel failed with CUDA error 701"), "auto", False, False),  # this call only
    (RuntimeError("cuLaunchKernel failed with CUDA error 701"), 1, True, False),
    (cuda_build.CompileError("NVRTC could not compile the walk (sm_90a): error"), 1, True, False),
], ids=["oom", "compile", "load", "oserror", "launch", "launch-on", "compile-on"])
def test_the_chunked_forward_when_the_walk_fails(error, mode, raises, failed, monkeypatch):
    """The chunked forward with the CUDA walk chosen and failing: out of memory raises (and leaves the walk on);
    under ``auto`` a failed compile or load warns, records ``cuda_walk.FAILED`` (the walk then stays off in the
    process) and walks with Triton, a failed launch warns and walks this call with Triton, leaving the walk on for
    the next; under ``walk_CUDA=1`` every error raises."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    from palimpsa.kernels import chunked_fwd, fused_recurrent
    from scan_inputs import make_inputs

    x = make_inputs(1, 20, 2, 1, 4, 16)
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], x["M0"], x["I0"], 0.7, None, True, False, False)
    want = fused_recurrent._forward(*args, {"kernel": "chunked", "walk_CUDA": 0}, 8)[0]  # the Triton walk

    def walk(*args):
        raise error

    monkeypatch.delenv(cuda_walk.ENV, raising=False)
    monkeypatch.setattr(cuda_walk, "FAILED", None)
    monkeypatch.setattr(cuda_walk, "wanted", lambda *args: True)
    monkeypatch.setattr(cuda_walk, "walk", walk)
    monkeypatch.setattr(chunked_fwd, "WALK_RUNS", {"cuda": 0, "triton": 0})
    config = {"kernel": "chunked", "walk_CUDA": mode}
    if raises:
        with pytest.raises(type(error), match=str(error).split(" (")[0]):
            fused_recurrent._forward(*args, config, 8)
        assert chunked_fwd.WALK_RUNS == {"cuda": 0, "triton": 0}
    else:
        with pytest.warns(RuntimeWarning, match="the CUDA chunk walk failed"):
            y = fused_recurrent._forward(*args, config, 8)[0]
        assert torch.equal(y, want)
        assert chunked_fwd.WALK_RUNS == {"cuda": 0, "triton": 1}
    assert (cuda_walk.FAILED == str(error)) if failed else cuda_walk.FAILED is None


@pytest.mark.parametrize("head_dim, want", [(64, 64), (128, 64), (256, 64), (32, 32), (40, 40), (8, 8), (12, 0),
                                            (72, 0), (96, 0)])
def test_channels_per_cta(head_dim, want):
    """64 channels a CTA where 64 divide the head dimension, else the head dimension itself where it is a multiple
    of 8 below 64, else none (the Triton walk)."""
    assert cuda_walk.channels_per_cta(head_dim) == want


def test_stage_bytes():
    """Two stages of 16 tokens: keys, squared keys and queries in float32, the CTA's values and gains in the inputs'
    dtype, the log decays (the kernel's ``Stage``, which the launch's dynamic shared memory must cover)."""
    assert cuda_walk.stage_bytes(torch.bfloat16, 64) == 2 * 16 * (3 * 128 * 4 + 2 * 64 * 2 + 4)
    assert cuda_walk.stage_bytes(torch.float16, 64) == cuda_walk.stage_bytes(torch.bfloat16, 64)
    assert cuda_walk.stage_bytes(torch.float32, 32) == 2 * 16 * (3 * 128 * 4 + 2 * 32 * 4 + 4)
