"""One chunk-parallel forward (no gradient) at 2.7b shapes, bf16, with the local pass in CUDA C++ and then in Triton,
for ncu: ``python ncu_fwd.py [B] [L]``."""

import sys

import torch
from palimpsa.kernels import chunked_fwd, fused_recurrent

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1
length = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
gen = torch.Generator(device="cuda").manual_seed(0)
v = torch.randn(batch, length, 80, 64, device="cuda", generator=gen).bfloat16()
k = torch.randn(batch, length, 1, 128, device="cuda", generator=gen).bfloat16()
q = torch.randn(batch, length, 1, 128, device="cuda", generator=gen).bfloat16()
g = -torch.rand(batch, length, 80, device="cuda", generator=gen) * 2
beta = torch.rand(batch, length, 80, 64, device="cuda", generator=gen).bfloat16()
for cuda in (1, 0):
    with torch.no_grad():
        chunked_fwd.chunked_forward(v, k, q, g, beta, None, None, 1.0, None, False, False, False,
                                    {"kernel": "chunked", "local_CUDA": cuda}, fused_recurrent.CHUNK_SIZE)
torch.cuda.synchronize()
print("done", chunked_fwd.LOCAL_RUNS)
