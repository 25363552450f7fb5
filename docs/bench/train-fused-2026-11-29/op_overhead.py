"""The host's cost of a call through ``torch.library.custom_op`` (how the fused ops and the scan are registered)
against a plain ``torch.autograd.Function`` and a bare ``clone``, on the CPU with a 4-element tensor so that the
body costs nearly nothing: microseconds a forward, and a forward with a sum and its backward. Run from the
repository root (no GPU needed): ``python3 docs/bench/train-fused-2026-11-29/op_overhead.py``."""

import time

import torch


@torch.library.custom_op("overhead_probe::copy", mutates_args=())
def copy_op(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@copy_op.register_fake
def _copy_fake(x):
    return torch.empty_like(x)


copy_op.register_autograd(lambda ctx, grad: grad, setup_context=lambda ctx, inputs, output: None)


class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


def per_call_us(fn, calls: int) -> float:
    for _ in range(calls // 10):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    x = torch.randn(4, requires_grad=True)
    for name, call in (("custom_op", lambda: torch.ops.overhead_probe.copy(x)), ("autograd.Function",
                       lambda: Copy.apply(x)), ("clone", lambda: x.clone())):
        forward = per_call_us(call, 5000)
        both = per_call_us(lambda call=call: call().sum().backward(), 2000)
        print(f"{name:>17}: forward {forward:5.1f} us, forward + sum + backward {both:5.1f} us")


if __name__ == "__main__":
    main()
