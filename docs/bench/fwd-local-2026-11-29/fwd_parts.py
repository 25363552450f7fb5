"""The chunk-parallel forward's launches timed per tiling of its local pass (the chunks' end states from a zero
start), 2.7b shapes, L = 8192: bf16 at B = 1 and 4, and fine-tuning's mix (float32 values and gains, bf16 keys and
queries, TF32 allowed) at B = 1. Whole forwards (no gradient) by CUDA events in interleaved rounds, medians; then one
profiled forward a tiling for the time of each kernel, and the checkpoints' largest relative difference from the
first tiling's.

    python docs/bench/fwd-local-2026-11-29/fwd_parts.py [--tilings "-,BP=64,BT=64"] [--rounds 8]

A tiling is ``KEY=VALUE:...`` over chunked_fwd.CHUNKED_FWD_CONFIG's keys (``-`` for none), ``stages`` (the local
kernel's ``num_stages``, Triton's default where unset), and the CUDA local pass's ``wgmma`` (0: its mma.sync form,
cuda_fwd_local.WGMMA) and ``raws`` (its stages of inputs, cuda_fwd_local.RAWS, which only ``git apply
docs/bench/fwd-local-2026-11-29/raws.patch`` gives).
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import bench_scan  # noqa: E402
from palimpsa.kernels import chunked_fwd, cuda_fwd_local, fused_recurrent  # noqa: E402

ORIGINAL = chunked_fwd.palimpsa_fwd_local_kernel


class Staged:
    """The local kernel launched with ``num_stages`` (the config has no key for it)."""

    def __init__(self, stages):
        self.stages = stages

    def __getitem__(self, grid):
        return lambda *args, **kwargs: ORIGINAL[grid](*args, num_stages=self.stages, **kwargs)


def parse(tiling: str) -> tuple[dict, int | None]:
    keys = {} if tiling == "-" else dict(item.split("=") for item in tiling.split(":"))
    stages = keys.pop("stages", None)
    return {key: int(value) for key, value in keys.items()}, int(stages) if stages else None


def forward(inputs, config, stages, want_checkpoints=False):
    chunked_fwd.palimpsa_fwd_local_kernel = Staged(stages) if stages else ORIGINAL
    config = dict(config)
    saved = cuda_fwd_local.WGMMA, getattr(cuda_fwd_local, "RAWS", None)
    cuda_fwd_local.WGMMA = bool(config.pop("wgmma", saved[0]))
    if "raws" in config:
        cuda_fwd_local.RAWS = config.pop("raws")
    try:
        with torch.no_grad():
            out = chunked_fwd.chunked_forward(
                inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], None, None, 1.0, None,
                False, False, want_checkpoints, {"kernel": "chunked", **config}, fused_recurrent.CHUNK_SIZE)
    finally:
        chunked_fwd.palimpsa_fwd_local_kernel = ORIGINAL
        cuda_fwd_local.WGMMA = saved[0]
        if saved[1] is not None:
            cuda_fwd_local.RAWS = saved[1]
    return out


def event_ms(fn, reps=20) -> float:
    fn()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def kernel_ms(fn, reps=5) -> dict:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    sums = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.name.split("(")[0].split("<")[0][:40]
            sums[name] = sums.get(name, 0.0) + event.device_time / 1000 / reps
    return dict(sorted(sums.items(), key=lambda item: -item[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tilings", default="-,BP=64,BT=64,BP=64:BT=64,BP=64:local_warps=8,stages=2,stages=1")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--cases", default="bf16:1,bf16:4,mix:1")
    args = parser.parse_args()
    tilings = args.tilings.split(",")
    torch.set_float32_matmul_precision("high")
    for case in args.cases.split(","):
        kind, batch = case.split(":")
        bench_scan.OURS_DTYPE = torch.bfloat16
        inputs = bench_scan.scan_inputs(int(batch), 8192)
        if kind == "mix":
            inputs["v"], inputs["beta"] = inputs["v"].float(), inputs["beta"].float()
        times = {t: [] for t in tilings}
        for _ in range(args.rounds):
            for t in tilings:
                config, stages = parse(t)
                times[t].append(event_ms(lambda c=config, s=stages, x=inputs: forward(x, c, s)))
        base = None
        for t in tilings:
            config, stages = parse(t)
            ck = forward(inputs, config, stages, want_checkpoints=True)[4:]
            if base is None:
                base = ck
            diff = max(((a - b).norm() / b.norm()).item() for a, b in zip(ck, base, strict=True))
            parts = kernel_ms(lambda c=config, s=stages, x=inputs: forward(x, c, s))
            listed = ", ".join(f"{name} {ms:.3f}" for name, ms in list(parts.items())[:5])
            print(f"{kind} B={batch} {t:28}: forward {statistics.median(times[t]):.3f} ms (median of {args.rounds}), "
                  f"checkpoints {diff:.1e} from the first; kernels: {listed}", flush=True)


if __name__ == "__main__":
    main()
