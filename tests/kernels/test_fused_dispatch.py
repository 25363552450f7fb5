"""Where each fused elementwise op of ``palimpsa.kernels`` runs its Triton kernels and where its PyTorch expressions:
the values and gains (``gains.py``), the readout (``readout.py``), the convolution (``conv.py``) and the block norm
(``norm.py``). Their kernels' own tests are in ``test_gains.py``, ``test_readout.py``, ``test_conv.py`` and
``test_norm.py``."""

from __future__ import annotations

import pytest
import torch
from palimpsa.kernels import add_rms_norm, causal_conv_silu, conv, gains, mixer_readout, norm, readout
from palimpsa.kernels import scan_values_and_gains as values_and_gains
from palimpsa.kernels.conv import reference_conv_silu
from palimpsa.kernels.gains import reference_values_and_gains
from palimpsa.kernels.norm import reference_add_rms_norm
from palimpsa.kernels.readout import reference_readout


def _gains_calls(r):
    x, gate = r(2, 5, 3, 4), r(2, 5, 12)
    dt, factor = r(2, 5, 3).abs(), r(2, 5, 3)
    return x, (values_and_gains, reference_values_and_gains), (x, dt, gate, factor)


def _readout_calls(r):
    y, x, z = r(2, 5, 3, 4), r(2, 5, 3, 4), r(2, 5, 12)
    return x, (mixer_readout, reference_readout), (y, x, r(3), z, r(12), 1e-5, 6, False, torch.float32)


def _conv_calls(r):
    x = r(2, 5, 6)
    return x, (causal_conv_silu, reference_conv_silu), (x, r(6, 1, 4), r(6), None)


def _norm_calls(r):
    hidden = r(2, 5, 8)
    return hidden, (add_rms_norm, reference_add_rms_norm), (hidden, r(2, 5, 8), r(8), 1e-5, True)


# module, its kernels' getter, the kernels' entry point, the environment variable that turns them off, the calls
CASES = {
    "gains": (gains, "_fused", "fused_values_and_gains", "FUSED_GAINS_ENV", _gains_calls),
    "readout": (readout, "_fused_readout", "fused_readout", "FUSED_READOUT_ENV", _readout_calls),
    "conv": (conv, "_fused_conv", "fused_conv_silu", "FUSED_CONV_ENV", _conv_calls),
    "norm": (norm, "_fused_norm", "fused_add_rms_norm", "FUSED_NORM_ENV", _norm_calls),
}


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", CASES)
def test_the_dispatch_runs_pytorch_off_the_gpu_and_where_the_kernels_do_not_fit(name, monkeypatch):
    module, getter, entry, _, calls_of = CASES[name]
    gen = torch.Generator().manual_seed(0)
    x, (dispatched, reference), args = calls_of(lambda *shape: torch.randn(*shape, generator=gen))
    calls = []
    fake = type("Fake", (), {"supported": staticmethod(lambda *a: calls.append("supported") or False),
                             entry: staticmethod(lambda *a: calls.append("fused"))})
    assert getattr(module, getter)(x) is None  # off the GPU: PyTorch
    monkeypatch.setattr(module, getter, lambda x: fake)
    got, want = _as_tuple(dispatched(*args)), _as_tuple(reference(*args))
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
    assert calls == ["supported"]  # operands the kernels do not take: PyTorch


@pytest.mark.parametrize("name", CASES)
def test_the_environment_turns_the_kernels_off(name, monkeypatch):
    pytest.importorskip("triton")
    module, getter, _, env, _ = CASES[name]
    on_gpu = torch.empty(0, device="meta")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setenv(getattr(module, env), "0")
    assert getattr(module, getter)(on_gpu) is None
    monkeypatch.delenv(getattr(module, env))
    assert getattr(module, getter)(on_gpu) is not None
