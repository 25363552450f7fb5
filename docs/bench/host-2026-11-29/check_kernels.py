"""The fused convolution, readout and block norm (kernels/fused_conv.py, fused_readout.py, fused_norm.py) against the
PyTorch expressions at a 2.7b layer's shapes (L = 8192: the convolution over 5376 channels, the readout over 80 heads
of 64 channels in one group, the block norm over 2560 channels with a float32 residual), in float32 and bf16, the
convolution also over a packed row of four documents: the output and every input's gradient, each as
max |fused - PyTorch| / max |PyTorch|. Run from the repository root:
``python3 docs/bench/host-2026-11-29/check_kernels.py``."""

import torch
from palimpsa.kernels import fused_conv, fused_norm, fused_readout
from palimpsa.kernels.conv import reference_conv_silu
from palimpsa.kernels.norm import reference_add_rms_norm
from palimpsa.kernels.readout import reference_readout


def rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


def compare(label, fn, ref, leaves, args):
    results = []
    for f in (fn, ref):
        for leaf in leaves:
            leaf.grad = None
        out = f(*args)
        if isinstance(out, tuple):  # the block norm: its normed output and the residual, one loss over both
            out = torch.cat([out[0].float(), out[1].float()], -1)
        gen = torch.Generator(device="cuda").manual_seed(1)
        out.backward(torch.randn(out.shape, device="cuda", generator=gen).to(out.dtype))
        results.append([out.detach()] + [leaf.grad.clone() for leaf in leaves])
    diffs = [rel(g, w) for g, w in zip(*results)]
    print(f"{label}: output {diffs[0]:.2e}, gradients " + ", ".join(f"{d:.2e}" for d in diffs[1:]), flush=True)


def main() -> None:
    torch.set_float32_matmul_precision("highest")
    gen = torch.Generator(device="cuda").manual_seed(0)
    cu_seqlens = torch.tensor([0, 2048, 4096, 6144, 8192], device="cuda", dtype=torch.int32)
    for dtype in (torch.float32, torch.bfloat16):
        wide = torch.randn(1, 8192, 10576, device="cuda", generator=gen).to(dtype).requires_grad_(True)
        weight = (0.5 * torch.randn(5376, 1, 4, device="cuda", generator=gen)).to(dtype).requires_grad_(True)
        bias = (0.3 * torch.randn(5376, device="cuda", generator=gen)).to(dtype).requires_grad_(True)
        x = wide[..., 5120:5120 + 5376]
        for packed in (None, cu_seqlens):
            compare(f"conv    {str(dtype)[6:]:>8} {'packed' if packed is not None else 'one row':>7} (x, w, b)",
                    fused_conv.fused_conv_silu, reference_conv_silu, [wide, weight, bias], (x, weight, bias, packed))
        y = torch.randn(1, 8192, 80, 64, device="cuda", generator=gen).requires_grad_(True)
        xh = wide[..., :5120].view(1, 8192, 80, 64)
        z = wide[..., 5120:10240]
        D = (1 + torch.rand(80, device="cuda", generator=gen)).to(dtype).requires_grad_(True)
        norm_w = (1 + 0.3 * torch.randn(5120, device="cuda", generator=gen)).to(dtype).requires_grad_(True)
        compare(f"readout {str(dtype)[6:]:>8} one row (y, x/z, D, w)", fused_readout.fused_readout, reference_readout,
                [y, wide, D, norm_w], (y, xh, D, z, norm_w, 1e-5, 5120, False, dtype))
        hidden = torch.randn(1, 8192, 2560, device="cuda", generator=gen).to(dtype).requires_grad_(True)
        residual = (3 * torch.randn(1, 8192, 2560, device="cuda", generator=gen)).requires_grad_(True)
        block_w = (1 + 0.3 * torch.randn(2560, device="cuda", generator=gen)).to(dtype).requires_grad_(True)
        compare(f"norm    {str(dtype)[6:]:>8} one row (h, res, w)", fused_norm.fused_add_rms_norm,
                reference_add_rms_norm, [hidden, residual, block_w], (hidden, residual, block_w, 1e-5, True))


if __name__ == "__main__":
    main()
