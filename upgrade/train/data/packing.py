"""Batches: documents packed into rows, as a resumable stream for training or once for evaluation.

:class:`TokenStream` makes :class:`Batch` es in one of two modes:

- packed (default): ``batch_size`` rows of ``seq_len`` tokens filled by concatenating documents, flattened into one
  row ``[1, batch_size * seq_len]`` with ``cu_seqlens`` marking every document piece and every row start, so the
  model starts a fresh state at each. A document that overflows a row continues at the start of the next row (or
  the next batch) as a new piece. The first token of every piece has label -100 (nothing predicts it).
- state passing (``data.state_passing``, truncated backprop through time): each of the ``batch_size`` rows walks its
  own document; a long document spans consecutive batches (``continues`` True: carry the row's state, e.g. with
  ``PalimpsaCache.reset_rows(batch.continues, prior)``); a document that ends mid-row leaves the rest of the row as
  padding (EOS id, else 0; label -100) and the row's next batch starts the next document (``continues`` False).
  Column 0 always has label -100: the model's loss shifts labels inside the batch, so the first token of a
  continued segment (predicted by the last position of the previous batch) is not a target.

Both are deterministic functions of the data and ``data.seed``; ``state_dict()`` is a small JSON-serialisable
position from which a fresh stream continues with exactly the next batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...errors import PalimpsaError

if TYPE_CHECKING:
    from .mixture import DocumentSource

STATE_FORMAT = 1


@dataclass
class Batch:
    """One micro-batch. Packed: ``[1, batch_size * seq_len]`` with ``cu_seqlens``; state passing:
    ``[batch_size, seq_len]`` with ``continues``. ``labels`` is -100 where there is no target (the first token of
    every piece, padding, and the non-answer tokens of answer-only documents); the model shifts labels by one, so
    ``labels[t]`` is predicted at ``t - 1``. ``tokens`` counts the targets, ``input_tokens`` the positions that hold
    a document token (what throughput counts). ``weights`` (same shape as ``labels``) is each target's weight in the
    loss, None when every target weighs 1 (no source sets ``loss_weight`` or ``answer_weight``)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    cu_seqlens: torch.Tensor | None
    continues: torch.Tensor | None
    tokens: int
    input_tokens: int
    weights: torch.Tensor | None = None


def document_arrays(doc: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, labels, weights)`` of a whole document as arrays: ``labels`` is -100 where a
    :class:`~.mixture.Document`'s ``targets`` leave a token out, ``weights`` its ``weight`` per token. Cached on a
    Document (the worker processes of ``data.workers`` make them there), recomputed for a plain list."""
    cached = getattr(doc, "arrays", None)
    if cached is not None:
        return cached
    ids = np.asarray(doc, dtype=np.int64)
    labels = ids.copy()
    targets = getattr(doc, "targets", None)
    if targets is not None:
        labels[~np.asarray(targets, dtype=bool)] = -100
    weight = getattr(doc, "weight", 1.0)
    weights = (np.asarray(weight, dtype=np.float32) if isinstance(weight, list)
               else np.full(len(ids), weight, dtype=np.float32))
    arrays = (ids, labels, weights)
    if hasattr(doc, "__dict__"):
        doc.arrays = arrays
    return arrays


def piece_arrays(doc: list[int], start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, labels, weights)`` of the piece ``doc[start:end]``: its first token is no target (nothing in the piece
    predicts it); the others are, unless the document's ``targets`` leave them out."""
    ids, labels, weights = document_arrays(doc)
    labels = labels[start:end].copy()
    labels[:1] = -100
    return ids[start:end], labels, weights[start:end]


def _target_weights(labels: np.ndarray, weights: np.ndarray) -> torch.Tensor | None:
    """The weights of a batch's targets (0 elsewhere), or None when every target weighs 1."""
    targets = labels != -100
    if np.all(weights[targets] == 1.0):
        return None
    return torch.from_numpy(np.where(targets, weights, 0.0).astype(np.float32))


class PackedRows:
    """The ``rows`` rows of ``seq_len`` tokens of one packed batch, filled piece by piece: a document that overflows
    a row goes on at the start of the next one, as a new piece."""

    def __init__(self, rows: int, seq_len: int):
        self.seq_len, self.size = seq_len, rows * seq_len
        self.length = 0
        self.pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.starts: list[int] = []  # where each piece starts

    @property
    def full(self) -> bool:
        return self.length >= self.size

    def place(self, doc: list[int], offset: int) -> int:
        """Place as much of ``doc[offset:]`` as the current row holds; returns the offset of what is left."""
        end = offset + min(self.seq_len - self.length % self.seq_len, len(doc) - offset)
        self.starts.append(self.length)
        self.pieces.append(piece_arrays(doc, offset, end))
        self.length += end - offset
        return end

    def batch(self, pad_id: int | None = None) -> Batch:
        """The rows flattened into one packed row with ``cu_seqlens``; with ``pad_id``, a last row left short is
        filled with it as a piece of its own (labels -100)."""
        pieces, starts, length = list(self.pieces), list(self.starts), self.length
        if pad_id is not None and length % self.seq_len:
            padding = self.seq_len - length % self.seq_len
            pieces.append((np.full(padding, pad_id, dtype=np.int64), np.full(padding, -100, dtype=np.int64),
                           np.zeros(padding, dtype=np.float32)))
            starts.append(length)
            length += padding
        ids, labels, weights = (np.concatenate([piece[i] for piece in pieces]) for i in range(3))
        weight = _target_weights(labels, weights)
        return Batch(torch.from_numpy(ids)[None], torch.from_numpy(labels)[None],
                     torch.tensor(starts + [length], dtype=torch.long), None, int((labels != -100).sum()),
                     self.length, None if weight is None else weight[None])


class TokenStream:
    """An infinite, resumable stream of :class:`Batch` es over a :class:`DocumentSource`, packed or state passing
    (see the module docstring)."""

    def __init__(self, documents: DocumentSource, seq_len: int, batch_size: int, state_passing: bool = False):
        if seq_len < 2 or batch_size < 1:
            raise PalimpsaError(f"seq_len must be >= 2 and batch_size >= 1, got {seq_len} and {batch_size}")
        self.documents, self.seq_len, self.batch_size = documents, seq_len, batch_size
        self.state_passing = state_passing
        self.pad_id = documents.pad_id
        self._current: dict | None = None  # packed: {"doc", "offset", "snapshot"}
        self._rows: list[dict | None] = [None] * batch_size  # state passing: one such dict per row

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        return self.next_batch()

    def _fetch(self) -> dict:
        snapshot = self.documents.state_dict()
        return {"doc": self.documents.next_document(), "offset": 0, "snapshot": snapshot}

    def next_batch(self) -> Batch:
        return self._next_rows() if self.state_passing else self._next_packed()

    def _next_packed(self) -> Batch:
        rows = PackedRows(self.batch_size, self.seq_len)
        while not rows.full:
            current = self._current
            if current is None or current["offset"] >= len(current["doc"]):
                current = self._current = self._fetch()
            current["offset"] = rows.place(current["doc"], current["offset"])
        return rows.batch()

    def _next_rows(self) -> Batch:
        length = self.seq_len
        ids = torch.full((self.batch_size, length), self.pad_id, dtype=torch.long)
        labels = torch.full((self.batch_size, length), -100, dtype=torch.long)
        weights = torch.zeros((self.batch_size, length), dtype=torch.float32)
        continues = torch.zeros(self.batch_size, dtype=torch.bool)
        input_tokens = 0
        for r in range(self.batch_size):
            row = self._rows[r]
            if row is not None and row["offset"] < len(row["doc"]):
                continues[r] = True
            else:
                row = self._rows[r] = self._fetch()
            start = row["offset"]
            end = min(start + length, len(row["doc"]))
            piece_ids, piece_labels, piece_weights = piece_arrays(row["doc"], start, end)
            row["offset"] = end
            input_tokens += end - start
            ids[r, : end - start] = torch.from_numpy(piece_ids)
            labels[r, : end - start] = torch.from_numpy(piece_labels)
            weights[r, : end - start] = torch.from_numpy(piece_weights)
        return Batch(ids, labels, None, continues, int((labels != -100).sum()), input_tokens,
                     _target_weights(labels.numpy(), weights.numpy()))

    # -- position ------------------------------------------------------------------------------------------------

    @staticmethod
    def _position(entry: dict | None) -> dict | None:
        if entry is None or entry["offset"] >= len(entry["doc"]):
            return None
        return {"source": entry["snapshot"], "offset": entry["offset"], "length": len(entry["doc"])}

    def state_dict(self) -> dict:
        """JSON-serialisable position: a fresh stream over the same data that loads it yields the same next batch."""
        state = {"format": STATE_FORMAT, "mode": "state_passing" if self.state_passing else "packed",
                 "seq_len": self.seq_len, "batch_size": self.batch_size, "documents": self.documents.state_dict()}
        if self.state_passing:
            state["rows"] = [self._position(row) for row in self._rows]
        else:
            state["current"] = self._position(self._current)
        return state

    def _restore(self, position: dict | None) -> dict | None:
        if position is None:
            return None
        doc = self.documents.document_at(position["source"])
        if len(doc) != position["length"]:
            raise PalimpsaError("the data changed since the position was saved (a document has another length); "
                                "resume with the data and tokenizer the run started with")
        return {"doc": doc, "offset": int(position["offset"]), "snapshot": position["source"]}

    def load_state_dict(self, state: dict) -> None:
        mode = "state_passing" if self.state_passing else "packed"
        saved = (state.get("mode"), state.get("seq_len"), state.get("batch_size"))
        if state.get("format") != STATE_FORMAT or saved != (mode, self.seq_len, self.batch_size):
            raise PalimpsaError(f"the saved data position is for mode={saved[0]}, seq_len={saved[1]}, "
                                f"batch_size={saved[2]}, but this run has mode={mode}, seq_len={self.seq_len}, "
                                f"batch_size={self.batch_size}; resume with the recipe's data settings unchanged")
        if self.state_passing:
            rows = [self._restore(p) for p in state["rows"]]
        else:
            current = self._restore(state["current"])
        self.documents.load_state_dict(state["documents"])
        if self.state_passing:
            self._rows = rows
        else:
            self._current = current


def pack_documents(documents: Sequence[list[int]], seq_len: int, batch_size: int, pad_id: int = 0,
                   max_batches: int | None = None) -> list[Batch]:
    """Packed batches over ``documents`` in order, once (evaluation): the last batch may have fewer rows, its last
    row padded (a piece of its own, labels -100)."""
    batches: list[Batch] = []
    rows = PackedRows(batch_size, seq_len)
    for doc in documents:
        offset = 0
        while offset < len(doc):
            if rows.full:
                batches.append(rows.batch())
                rows = PackedRows(batch_size, seq_len)
                if max_batches is not None and len(batches) >= max_batches:
                    return batches
            offset = rows.place(doc, offset)
    if rows.length:
        batches.append(rows.batch(pad_id))
    return batches
