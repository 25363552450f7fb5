"""The chunk-parallel backward's local pass in CUDA C++ (``palimpsa.kernels.cuda_local``) on the CPU.

NVRTC compiles it for sm_90a without a GPU and Triton's ``cuobjdump`` disassembles the cubin: in bf16 and fp16, at
2.7b shapes and a small one with packed sequences, with 8 channels a lane (8 warps) and 4 (16 warps), its registers
within ``__launch_bounds__``, its shared memory within an H100's or H200's 227 KB a CTA, and with 8 channels a lane
no local memory at all; every timing probe compiles. Then the dispatch on CPU tensors (``LOCAL`` "cuda" refuses
with the reason, "auto" never takes it). Its gradients are checked on a GPU against float64 and the Gluon pass
(docs/bench/cuda-local-2026-11-29, ``check_local.py``).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile

import pytest
import torch
from palimpsa.kernels import chunked_bwd, cuda_build, cuda_local

SHAPES = {"2.7b": (80, 1, 64, 512), "small": (8, 2, 128, 64)}  # heads, groups, head dim, chunk
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LAUNCHES = [(d, s, ch) for d in DTYPES for s in SHAPES for ch in (8, 4)]
IDS = [f"{d}-{s}-{ch}ch" for d, s, ch in LAUNCHES]
MAX_SHARED = 227 * 1024  # the most dynamic shared memory a CTA may ask for on compute capability 9.0


@functools.cache
def disassembly(dtype: str, shape: str, lane_channels: int, probe: int = 0) -> str:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    cubin = cuda_local.compile_cubin(DTYPES[dtype], *SHAPES[shape], varlen=shape == "small", arch="sm_90a",
                                     lane_channels=lane_channels, probe=probe)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "local.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([tool, "-sass", "-res-usage", path], capture_output=True, text=True, check=True).stdout


def resources(text: str) -> dict:
    found = re.findall(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    assert len(found) == 1, found
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, found[0])))


@pytest.mark.parametrize("dtype, shape, lane_channels", LAUNCHES, ids=IDS)
def test_compiles_within_bounds(dtype, shape, lane_channels):
    """One CTA an SM: 255 registers a thread for 8 warps, 128 for 16; the state slots, a segment's inputs and the
    reduction buffers within 227 KB; 8 channels a lane spill nothing (4 take a 16-byte stack, outside the token
    loops)."""
    text = disassembly(dtype, shape, lane_channels)
    assert "code for sm_90a" in text
    used = resources(text)
    assert used["REG"] <= 65536 // (32 * cuda_local.warps(lane_channels)), used
    assert cuda_local.shared_bytes(lane_channels) + used["SHARED"] <= MAX_SHARED + 1024
    if lane_channels == 8:
        assert used["LOCAL"] == 0 and used["STACK"] == 0, used
    # a reciprocal a state element and token: 32 (8 channels x 4 states) or 16 in the reverse step
    assert len(re.findall(r"MUFU\.RCP", text)) >= 4 * lane_channels


def test_warps_and_shared_memory():
    """A warp holds all 64 channels of 16 (8 channels a lane) or 8 states (4 a lane), so 8 or 16 warps cover 128."""
    assert (cuda_local.warps(8), cuda_local.warps(4)) == (8, 16)
    assert cuda_local.shared_bytes(8) == 3 * 65536 + 16 * (2 * 128 + 3 * 64) * 2 + 16 * 4 + 2 * 8 * 128 * 4 + 2 * 8 * 4
    assert cuda_local.shared_bytes(4) > cuda_local.shared_bytes(8)
    assert cuda_local.slab_states(512) == 31 and cuda_local.slab_states(16) == 1


@pytest.mark.parametrize("probe", [1, 2, 4, 8, 15])
def test_probes_compile(probe):
    """The timing probes (parts left out, docs/bench/cuda-local-2026-11-29 call 3) compile."""
    assert resources(disassembly("bf16", "2.7b", 8, probe))["REG"] <= 255


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


def test_launch_refuses_other_lane_widths(monkeypatch):
    """Only 8 and 4 channels a lane are written; another width is refused before anything is compiled."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    v, k, q, beta, g, dy = cpu_inputs()
    with pytest.raises(ValueError, match="4 or 8 channels a lane"):
        cuda_local.launch(v, k, q, g, beta, None, None, None, dy, None, None, None, None, None, None, None, None,
                          None, None, None, 1, 1, 512, lane_channels=2)
