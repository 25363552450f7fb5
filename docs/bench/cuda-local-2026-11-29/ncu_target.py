"""One forward + backward at 2.7b shapes with the chunk-parallel backward's local pass in CUDA C++ (for ncu):
``python ncu_target.py [B] [L]`` (named ``profile.py`` in call 4, where it shadowed the standard library module
that ``torch._dynamo`` imports)."""

import os
import sys

import torch

os.environ["PALIMPSA_TRITON_BACKWARD"] = "chunked"
os.environ["PALIMPSA_CHUNKED_LOCAL"] = "cuda"
from palimpsa.kernels import palimpsa_scan  # noqa: E402

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1
length = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
gen = torch.Generator(device="cuda").manual_seed(0)
v = torch.randn(batch, length, 80, 64, device="cuda", generator=gen).bfloat16().requires_grad_()
k = torch.randn(batch, length, 1, 128, device="cuda", generator=gen).bfloat16().requires_grad_()
q = torch.randn(batch, length, 1, 128, device="cuda", generator=gen).bfloat16().requires_grad_()
g = (-torch.rand(batch, length, 80, device="cuda", generator=gen) * 2).requires_grad_()
beta = torch.rand(batch, length, 80, 64, device="cuda", generator=gen).bfloat16().requires_grad_()
y, _, _ = palimpsa_scan(v, k, q, g, beta)
y.float().square().sum().backward()
torch.cuda.synchronize()
print("done", v.grad.float().norm().item())
