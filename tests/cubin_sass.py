"""The SASS of a cubin compiled on the CPU (NVRTC for sm_90a), for the CUDA kernels' tests: Triton's ``cuobjdump``
disassembles it; ``resources`` and ``instructions`` read the listing."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile


def cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def sass(cubin: bytes) -> str:
    """``cuobjdump -sass -res-usage`` of ``cubin``."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([cuobjdump(), "-sass", "-res-usage", path], capture_output=True, text=True,
                              check=True).stdout


def resources(text: str) -> dict:
    """The one function's registers, stack, static shared memory and local memory."""
    found = re.findall(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    assert len(found) == 1, f"one function's resource usage expected, found {found}"
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, found[0])))


def instructions(text: str) -> list:
    """The SASS as (address, opcode, operands)."""
    found = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);", line)
        if m:
            found.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return found
