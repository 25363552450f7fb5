"""How much host time one block's forward and backward take against their GPU time, in a fine-tuning step of a
2.7b-shaped model (L = 8192, bf16, TF32): for an upgraded block under the trainer's selective checkpointing (the
scan's outputs kept), the same block under plain checkpointing, and a plain Mamba2 block (mamba_ssm's SSD). The
host time is taken with the GPU held busy by a sleeping kernel, so that it is the host's own time to issue the
phase, not the time it waited for the GPU; the GPU time with CUDA events on an idle GPU. Then one whole step of the
upgraded model under torch.profiler's CPU activity: the operators with the most host time of their own.
Run from the repository root: ``python3 docs/bench/host-2026-11-29/host_phases.py [--layers 64]``."""

import argparse
import functools
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402

SLEEP_CYCLES = int(4e9)  # about 2 s of a busy GPU: longer than any phase's host time


def host_seconds(fn) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    torch.cuda.synchronize()
    return seconds


def gpu_seconds(fn) -> float:
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3


def launches(fn) -> int:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def phases(block, hidden, repeats: int) -> dict:
    """Median host and GPU seconds of the block's forward (under its checkpointing) and of its backward (recompute
    included), and their kernel counts."""
    grad = torch.randn_like(hidden)
    held = {}

    def forward():
        held["out"] = block(hidden)[0]

    def backward():
        torch.autograd.backward(held.pop("out"), grad)

    rows = {"fwd": [[], []], "bwd": [[], []]}
    for _ in range(repeats):
        rows["fwd"][0].append(host_seconds(forward))
        rows["bwd"][0].append(host_seconds(backward))
        rows["fwd"][1].append(gpu_seconds(forward))
        rows["bwd"][1].append(gpu_seconds(backward))
    counts = {"fwd": launches(forward), "bwd": launches(backward)}
    return {name: (statistics.median(h), statistics.median(g), counts[name]) for name, (h, g) in rows.items()}


def report(label: str, found: dict) -> None:
    for name, (host, gpu, count) in found.items():
        print(f"{label:<28} {name}: host {host * 1e3:7.2f} ms, GPU {gpu * 1e3:7.2f} ms, {count:4d} kernels, "
              f"host/GPU {host / gpu:5.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=64, help="upgraded layers of the 64 (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=30, help="rows of the step's CPU profile (0: no profile)")
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.layers, 64)
    model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=layers, beta_init=1e-3),
                  "cuda", torch.bfloat16)
    optimizer = prepare(model, layers)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq_len), device="cuda")

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    gc.collect()
    gc.freeze()
    hidden = torch.randn(1, args.seq_len, 2560, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # as above
    # the lowest trainable layer: the backward reaches the block input, as in every block above it
    block = model.backbone.layers[layers[len(layers) // 2]]
    selective = block._gradient_checkpointing_func
    report("upgraded, selective ckpt", phases(block, hidden, args.repeats))
    block._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False)
    report("upgraded, plain ckpt", phases(block, hidden, args.repeats))
    block._gradient_checkpointing_func = selective
    plain_index = next((i for i in range(64) if i not in layers), None)
    if plain_index is not None:
        report("plain Mamba2 block", phases(model.backbone.layers[plain_index], hidden, args.repeats))

    if not args.top:
        return
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        torch.cuda.synchronize()
    print(f"profiled step (CPU activity): {time.perf_counter() - start:.3f} s", flush=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))


if __name__ == "__main__":
    main()
