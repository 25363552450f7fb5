"""Equivalence figures: how far an upgraded model's logits are from its base Mamba2's on a probe batch."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

# Relative tolerance (max |logit diff| / max |base logit|) for "beta_scale = 0 reproduces the base model",
# by the dtype the models run in: float32 differs only in the order of the scan's sums, half types in rounding.
EXACT_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}


@dataclass
class LogitComparison:
    """Figures comparing candidate logits with base logits of the same probe."""

    max_abs_diff: float
    relative_diff: float  # max |diff| / max |base logit|
    mean_kl: float  # KL(base || candidate) per token, in nats
    top1_agreement: float  # fraction of positions with the same argmax

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def probe_input_ids(vocab_size: int, batch: int = 2, length: int = 64, seed: int = 0) -> torch.Tensor:
    """A seeded random probe ``[batch, length]`` drawn from the tokenizer's (unpadded) vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)


def compare_logits(base: torch.Tensor, candidate: torch.Tensor) -> LogitComparison:
    base, candidate = base.double(), candidate.double()
    diff = (candidate - base).abs().max().item()
    scale = base.abs().max().item() or 1.0
    kl = F.kl_div(candidate.log_softmax(-1), base.log_softmax(-1), log_target=True, reduction="none").sum(-1)
    agreement = (base.argmax(-1) == candidate.argmax(-1)).double().mean().item()
    return LogitComparison(diff, diff / scale, max(kl.mean().item(), 0.0), agreement)  # KL >= 0; rounding may dip


@torch.no_grad()
def probe_logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits of ``model`` on ``input_ids`` (moved to the model's device), back on the CPU, in float32 (float64
    for a float64 model)."""
    device = next(model.parameters()).device
    logits = model(input_ids.to(device)).logits
    return (logits if logits.dtype == torch.float64 else logits.float()).cpu()
