"""``PalimpsaCache``: the recurrent state every layer carries between calls (generation, segment-wise evaluation,
truncated backpropagation through time)."""

from __future__ import annotations

import torch


class PalimpsaCache:
    """Recurrent state of every layer, carried between calls (generation, segment-wise evaluation).

    Per layer: ``conv[i]``, the last ``d_conv - 1`` inputs of the causal convolution ``[B, d_conv - 1, conv_dim]``;
    ``ssm[i]``, the scan state ``(M, I)`` in float32, each ``[B, H, P, N]`` (``I`` is None for a Mamba2 layer,
    whose importance is the prior everywhere). ``seen_tokens`` counts the positions consumed so far.
    """

    def __init__(self, n_layer: int):
        self.conv: list[torch.Tensor | None] = [None] * n_layer
        self.ssm: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * n_layer
        self.seen_tokens = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def reset_rows(self, keep: torch.Tensor, importance_prior: float) -> None:
        """Restart the state of the batch rows where ``keep`` ``[B]`` is False (a new document begins there)."""
        for i, conv in enumerate(self.conv):
            if conv is not None:
                self.conv[i] = conv * keep.to(conv.dtype)[:, None, None]
        for i, state in enumerate(self.ssm):
            if state is not None:
                memory, importance = state
                row = keep.to(memory.dtype)[:, None, None, None]
                memory = memory * row
                if importance is not None:
                    importance = importance * row + importance_prior * (1 - row)
                self.ssm[i] = (memory, importance)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the batch rows ``beam_idx`` (beam search, batch selection)."""
        for i, conv in enumerate(self.conv):
            if conv is not None:
                self.conv[i] = conv.index_select(0, beam_idx.to(conv.device))
        for i, state in enumerate(self.ssm):
            if state is not None:
                self.ssm[i] = tuple(None if s is None else s.index_select(0, beam_idx.to(s.device)) for s in state)
