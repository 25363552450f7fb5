"""The CUDA forward local pass (kernels/cuda_fwd_local.py) compiled for sm_90a on the CPU, both forms, every dtype, at
2.7b shapes (80 heads, one group, P = 64, chunks of 512): registers, stack, shared memory a CTA, SASS instructions
and products. Needs NVRTC and Triton's cuobjdump (the test extra):

    PYTHONPATH=tests python docs/bench/fwd-local-2026-11-29/sass_counts.py
"""

import torch
from cubin_sass import instructions, resources, sass
from palimpsa.kernels import cuda_fwd_local

DTYPES = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "f32 values, bf16 keys":
          (torch.float32, torch.bfloat16), "f32": (torch.float32, None)}

for wgmma in (True, False):
    for name, (values, keys) in DTYPES.items():
        text = sass(cuda_fwd_local.compile_cubin(values, 80, 1, 64, 512, key_dtype=keys, wgmma=wgmma))
        used, listed = resources(text), instructions(text)
        products = sum("MMA" in op for _, op, _ in listed)
        print(f"{'wgmma' if wgmma else 'mma.sync':8} {name:22} registers {used['REG']:3}, stack {used['STACK']:2}, "
              f"shared {cuda_fwd_local.shared_bytes(values, keys, 512, wgmma):6} bytes, {len(listed):5} instructions, "
              f"{products} products")
