"""Activation checkpointing of a Palimpsa model: the same gradients as without it, and with the selective policy
the Triton scan runs once per upgraded layer instead of twice (its outputs are kept from the forward)."""

from __future__ import annotations

import functools
import os

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1", allow_module_level=True)

from palimpsa.kernels import fused_recurrent, palimpsa_scan  # noqa: E402
from palimpsa.upgrade.model import modeling  # noqa: E402
from palimpsa.upgrade.model.configuration import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM, enable_activation_checkpointing  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def triton_forwards(monkeypatch):
    """Every scan in the model goes through the Triton kernels; returns the list of the Palimpsa layers' forward
    launches (the plain Mamba2 layer's scans, without beta, are not counted)."""
    launches = []
    forward = fused_recurrent._forward

    def counted(*args, **kwargs):
        if args[4] is not None:
            launches.append(args[0].shape)
        return forward(*args, **kwargs)

    monkeypatch.setattr(fused_recurrent, "_forward", counted)
    monkeypatch.setattr(modeling, "palimpsa_scan", functools.partial(palimpsa_scan, backend="triton"))
    # the plain layer takes the same scan too (not mamba_ssm's, whose TF32 sums differ from run to run)
    monkeypatch.setattr(modeling, "mamba_ssm_chunk_scan", lambda: None)
    return launches


def tiny_model() -> PalimpsaForCausalLM:
    torch.manual_seed(0)
    config = PalimpsaConfig(d_model=16, n_layer=2, vocab_size=64, d_state=8, headdim=8, expand=2, ngroups=1,
                            upgraded_layers=[0], beta_init=0.5)
    return PalimpsaForCausalLM(config).to(device=DEVICE, dtype=torch.float64).train()


def gradients(model: PalimpsaForCausalLM, ids: torch.Tensor, **inputs) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids, **inputs).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("keep_scan_outputs", [True, False], ids=["selective", "full"])
def test_checkpointing_gives_the_same_gradients(triton_forwards, keep_scan_outputs):
    model = tiny_model()
    ids = torch.randint(0, 64, (1, 13), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    want = gradients(model, ids)
    assert len(triton_forwards) == 1  # one upgraded layer, no checkpointing: one forward
    triton_forwards.clear()

    enable_activation_checkpointing(model, keep_scan_outputs=keep_scan_outputs)
    got = gradients(model, ids)
    # kept: the recompute in the backward takes the scan's outputs from the forward; full: it runs the scan again
    assert len(triton_forwards) == (1 if keep_scan_outputs else 2)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-12, msg=name)
    assert any(".beta_" in name for name in got)


def test_packed_sequences_over_several_checkpoints(triton_forwards, monkeypatch):
    """Packed documents (``cu_seqlens``) across several scan checkpoints: kept outputs, same gradients."""
    monkeypatch.setattr(fused_recurrent, "CHUNK_SIZE", 8)
    monkeypatch.setattr(fused_recurrent, "BLOCK_SIZE", 4)
    model = tiny_model()
    ids = torch.randint(0, 64, (1, 21), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    cu_seqlens = torch.tensor([0, 5, 21], dtype=torch.int32, device=DEVICE)
    want = gradients(model, ids, cu_seqlens=cu_seqlens)
    enable_activation_checkpointing(model)
    triton_forwards.clear()
    got = gradients(model, ids, cu_seqlens=cu_seqlens)
    assert len(triton_forwards) == 1
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-12, msg=name)


def test_frozen_lower_layers_run_no_backward(triton_forwards):
    """Only the upper layer trains: checkpointed gradients equal the plain ones, and nothing below it records a
    graph (the embeddings' output does not require a gradient)."""
    model = tiny_model()
    for name, param in model.named_parameters():
        param.requires_grad_(".layers.1." in name)
    ids = torch.randint(0, 64, (1, 13), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    want = gradients(model, ids)
    enable_activation_checkpointing(model)
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda module, args, out: seen.append(out.requires_grad))
    got = gradients(model, ids)
    hook.remove()
    assert seen == [False]
    assert got.keys() == want.keys() and all(".layers.1." in name for name in got)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-12, msg=name)
