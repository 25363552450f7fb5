"""Host time to enqueue one forward + backward of the scan (B = 1, L = 8192, bf16), with each local pass: the
time ``forward_backward()`` takes to return on the CPU while the GPU still runs (no synchronisation inside the
timed calls), median of 20 after warm-up. Prints one line per local pass. Run from the repository root:
``python3 docs/bench/gluon-auto-2026-11-28/launch_overhead.py``."""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
from bench_scan import ours, scan_inputs  # noqa: E402

inputs = scan_inputs(1, 8192)
for backend in ("chunked@LOCAL=triton", "chunked@LOCAL=gluon", "chunked@LOCAL=triton", "chunked@LOCAL=gluon"):
    forward_backward = ours(inputs, backend=backend)[1]
    for _ in range(3):
        forward_backward()
    torch.cuda.synchronize()
    host = []
    for _ in range(20):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        forward_backward()
        host.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    print(f"{backend:24s} host ms per forward + backward: median {statistics.median(host):.2f}, "
          f"min {min(host):.2f}, max {max(host):.2f}", flush=True)
