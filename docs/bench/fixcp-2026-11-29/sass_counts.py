"""The backward's CUDA local pass and corrections compiled for sm_90a on the CPU with their copies in general loops
(FIXCP 0, the GPU-checked form) and at fixed offsets (FIXCP 1), at 2.7b shapes (80 heads, one group, P = 64, chunks
of 512): registers, stack, SASS instructions and 16-byte asynchronous copies (LDGSTS). Needs NVRTC and Triton's
cuobjdump (the test extra):

    PYTHONPATH=tests python docs/bench/fixcp-2026-11-29/sass_counts.py
"""

import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import cuda_correct, cuda_local

DTYPES = {"bf16": (torch.bfloat16, None), "f32 values, bf16 keys": (torch.float32, torch.bfloat16),
          "f32": (torch.float32, None)}
BUILDS = {"local": lambda values, keys, fixcp: cuda_local.compile_cubin(values, 80, 1, 64, 512, key_dtype=keys,
                                                                        defines=f"FIXCP={fixcp}"),
          "corrections": lambda values, keys, fixcp: cuda_correct.compile_cubin(values, 80, 1, 64, 512,
                                                                                key_dtype=keys, fixcp=fixcp)}

for kernel, build in BUILDS.items():
    for name, (values, keys) in DTYPES.items():
        for fixcp in (0, 1):
            text = sass(build(values, keys, fixcp))
            used, listed = resources(text), instructions(text)
            copies = sum(op.startswith("LDGSTS") for _, op, _ in listed)
            print(f"{kernel:11} {name:22} FIXCP {fixcp}: registers {used['REG']:3}, stack {used['STACK']:2}, "
                  f"{len(listed):5} instructions, {copies:3} copies")
