"""The CUDA local pass with CUDA_WG 1, 4 and 2 (warps summing their dq, dk together before one adds them), B = 1,
L = 8192, bf16, 2.7b shapes: the chunk-parallel backward's launches timed by CUDA events (chunked_bwd.TIMINGS),
interleaved rounds, medians.

    python docs/bench/cuda-correct-2026-11-29/time_wg.py
"""

import statistics

import torch
from palimpsa.kernels import chunked_bwd, palimpsa_scan


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    shape = (1, 8192, 80)
    v = (torch.randn(*shape, 64, generator=gen, device="cuda") * 0.5).to(bf16["dtype"]).requires_grad_(True)
    k = torch.randn(1, 8192, 1, 128, generator=gen, **bf16).requires_grad_(True)
    q = torch.randn(1, 8192, 1, 128, generator=gen, **bf16).requires_grad_(True)
    g = (-torch.rand(*shape, generator=gen, device="cuda")).requires_grad_(True)
    beta = torch.rand(*shape, 64, generator=gen, **bf16).requires_grad_(True)
    dy = torch.randn(*shape, 64, generator=gen, **bf16)
    times = {1: [], 4: [], 2: []}
    for r in range(6):
        for wg in times:
            chunked_bwd.CHUNKED_CONFIG["CUDA_WG"] = wg
            chunked_bwd.CHUNKED_CONFIG["LOCAL"] = "cuda"
            y, _, _ = palimpsa_scan(v, k, q, g, beta, importance_prior=1.0)
            chunked_bwd.TIMINGS = []
            y.backward(dy)
            torch.cuda.synchronize()
            local = [s.elapsed_time(e) for n, s, e in chunked_bwd.TIMINGS if n == "local"]
            chunked_bwd.TIMINGS = None
            if r:  # the first round compiles
                times[wg] += local
    for wg, ms in times.items():
        print(f"CUDA_WG {wg}: local pass {statistics.median(ms):.2f} ms (median of {len(ms)})", flush=True)


if __name__ == "__main__":
    main()
