"""The fused convolution and readout (kernels/fused_conv.py, kernels/fused_readout.py) against the PyTorch expressions
at real shapes: one plain Mamba2 block and one upgraded block of a 2.7b-shaped model (L = 8192), in float32 and in
bf16, one row and a packed row of four documents: the block's output, the gradient of its input and of every trained
parameter, each as max |fused - PyTorch| / max |PyTorch|. Run from the repository root:
``python3 docs/bench/host-2026-11-29/check_blocks.py``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_train import build, packed  # noqa: E402
from palimpsa.kernels import conv, readout  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402


def run(block, hidden, grad, cu_seqlens):
    block.zero_grad(set_to_none=True)
    hidden.grad = None
    out = block(hidden, None, cu_seqlens)[0]
    torch.autograd.backward(out, grad)
    grads = {"input": hidden.grad.clone()}
    grads.update({name: p.grad.clone() for name, p in block.named_parameters() if p.grad is not None})
    return out.detach(), grads


def rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


def main() -> None:
    torch.set_float32_matmul_precision("highest")
    fused = {"conv": conv._fused, "readout": readout._fused}
    worst = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = build(PalimpsaConfig(d_model=2560, n_layer=2, vocab_size=512, upgraded_layers=[1], beta_init=1e-3),
                      "cuda", dtype)
        for param in model.parameters():
            param.requires_grad_(True)
        with torch.no_grad():  # a beta gate that varies by token and channel
            model.backbone.layers[1].mixer.beta_up.weight.normal_(std=0.1)
        gen = torch.Generator(device="cuda").manual_seed(0)
        hidden = torch.randn(1, 8192, 2560, device="cuda", generator=gen).to(dtype).requires_grad_(True)
        grad = torch.randn(1, 8192, 2560, device="cuda", generator=gen).to(dtype)
        for index, label in ((0, "plain"), (1, "upgraded")):
            block = model.backbone.layers[index]
            for cu_seqlens in (None, packed(8192, 4)):
                conv._fused, readout._fused = fused["conv"], fused["readout"]
                got, got_grads = run(block, hidden, grad, cu_seqlens)
                conv._fused = readout._fused = lambda x: None
                want, want_grads = run(block, hidden, grad, cu_seqlens)
                diffs = {"output": rel(got, want)}
                diffs.update({name: rel(got_grads[name], g) for name, g in want_grads.items()})
                top = sorted(diffs.items(), key=lambda item: -item[1])
                key = f"{str(dtype)[6:]:>8} {label:>8} {'packed' if cu_seqlens is not None else 'one row':>7}"
                worst[key] = top[0]
                print(f"{key}: output {diffs['output']:.2e}, input grad {diffs['input']:.2e}; worst "
                      + ", ".join(f"{n} {d:.2e}" for n, d in top[:4]), flush=True)
        del model
        conv._fused, readout._fused = fused["conv"], fused["readout"]


if __name__ == "__main__":
    main()
