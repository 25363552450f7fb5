"""The CUDA kernels of one block's forward (under its checkpointing) and backward (the recompute included) in a
fine-tuning step of a 2.7b-shaped model (L = 8192, bf16, TF32), grouped by name with their summed times: an upgraded
block under the trainer's selective checkpointing and a plain Mamba2 block (mamba_ssm's SSD), side by side, so
that what the upgrade adds to a block beside the scan shows. Run from the repository root:
``python3 docs/bench/host-2026-11-29/block_kernels.py [--layers 8]``."""

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, prepare  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def kernels(fn, setup=None) -> dict:
    """Summed microseconds and counts of the CUDA kernels ``fn`` runs, by name (the best of three runs, each after
    ``setup``)."""
    best = None
    for _ in range(3):
        if setup is not None:
            setup()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        found = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                time_us, count = found.get(e.name, (0.0, 0))
                found[e.name] = (time_us + e.time_range.elapsed_us(), count + 1)
        total = sum(t for t, _ in found.values())
        if best is None or total < best[0]:
            best = (total, found)
    return best[1]


def show(label: str, found: dict, top: int) -> None:
    total = sum(t for t, _ in found.values())
    print(f"{label}: {total / 1e3:.3f} ms in {sum(c for _, c in found.values())} kernels", flush=True)
    for name, (time_us, count) in sorted(found.items(), key=lambda item: -item[1][0])[:top]:
        print(f"  {time_us / 1e3:7.3f} ms {count:4d}x  {name[:150]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8, help="upgraded layers of the 64 (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    layers = spread_layers(args.layers, 64)
    model = build(PalimpsaConfig(d_model=2560, n_layer=64, vocab_size=50288, upgraded_layers=layers, beta_init=1e-3),
                  "cuda", torch.bfloat16)
    prepare(model, layers)
    hidden = torch.randn(1, args.seq_len, 2560, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(hidden)
    plain_index = next(i for i in range(64) if i not in layers)
    for label, index in (("upgraded", layers[len(layers) // 2]), ("plain", plain_index)):
        block, held = model.backbone.layers[index], {}

        def forward(block=block, held=held):
            held["out"] = block(hidden)[0]

        def backward(held=held):
            torch.autograd.backward(held.pop("out"), grad)

        for _ in range(2):  # warm-up: compilation, autotuning
            forward()
            backward()
        fwd = kernels(forward, setup=held.clear)
        bwd = kernels(backward, setup=forward)
        show(f"{label} block {index}, forward", fwd, args.top)
        show(f"{label} block {index}, backward", bwd, args.top)


if __name__ == "__main__":
    main()
