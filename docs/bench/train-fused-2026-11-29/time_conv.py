"""The fused convolution's forward and backward (kernels/fused_conv.py) at a 2.7b layer's shapes (L = 8192, 5376
channels read in place from a 10576-wide bf16 projection, 4 taps), one row and a packed row of four documents, the
backward in several tiles (``BWD_TILE``: tokens, channels, warps), against PyTorch's expressions: the
median of 20 launches each by CUDA events, and what the bytes each must move (read x and g, write dx; read x, write
the output) take at 4.8 TB/s. Run from the repository root: ``python3 docs/bench/train-fused-2026-11-29/time_conv.py``.
"""

import statistics

import torch
from palimpsa.kernels import fused_conv
from palimpsa.kernels.conv import reference_conv_silu


def median_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    length, channels = 8192, 5376
    wide = torch.randn(1, length, 10576, device="cuda", generator=gen).to(torch.bfloat16)
    x = wide[..., 5120:5120 + channels]
    weight = (0.5 * torch.randn(channels, 1, 4, device="cuda", generator=gen)).to(torch.bfloat16)
    bias = (0.3 * torch.randn(channels, device="cuda", generator=gen)).to(torch.bfloat16)
    grad = torch.randn(1, length, channels, device="cuda", generator=gen).to(torch.bfloat16)
    packed = torch.tensor([0, 2048, 4096, 6144, 8192], device="cuda", dtype=torch.int32)
    floor = 2 * length * channels / 4.8e9  # ms for one [L, C] bf16 tensor moved once
    print(f"one [L, C] bf16 tensor at 4.8 TB/s: {floor:.3f} ms; forward moves 2, backward 3")
    for cu in (None, packed):
        label = "packed" if cu is not None else "one row"
        fwd = median_ms(lambda cu=cu: torch.ops.palimpsa.causal_conv_silu(x, weight, bias, cu))
        print(f"{label:>7} forward: {fwd:.3f} ms ({2 * floor / fwd:.0%} of the bandwidth)")
        default = fused_conv.BWD_TILE
        for tile in (default, (64, 64, 8), (32, 64, 4), (32, 128, 4), (64, 128, 8), (128, 64, 8)):
            fused_conv.BWD_TILE = tile
            bwd = median_ms(lambda cu=cu: torch.ops.palimpsa.causal_conv_silu_backward(x, weight, bias, cu,
                                                                                          grad))
            print(f"{label:>7} backward, tile {tile}{' (default)' if tile == default else ''}: {bwd:.3f} ms "
                  f"({3 * floor / bwd:.0%} of the bandwidth)")
        fused_conv.BWD_TILE = default
        xr, wr, br = (t.detach().requires_grad_(True) for t in (x, weight, bias))
        torch_fwd = median_ms(lambda xr=xr, wr=wr, br=br, cu=cu: reference_conv_silu(xr, wr, br, cu))
        out = reference_conv_silu(xr, wr, br, cu)
        torch_bwd = median_ms(lambda out=out, leaves=(xr, wr, br): torch.autograd.grad(out, leaves, grad,
                                                                                       retain_graph=True))
        print(f"{label:>7} PyTorch: forward {torch_fwd:.3f} ms, backward {torch_bwd:.3f} ms")


if __name__ == "__main__":
    main()
