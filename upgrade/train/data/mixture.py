"""The mixture: documents drawn from the sources by weight, tokenised, each with the tokenizer's EOS appended.

Every document is tokenised with no special tokens, then the tokenizer's EOS (when it has one) is appended.
:class:`DocumentSource` draws the source of each next document by weight with a counter-based seeded generator; a
finite source reshuffles (a new seeded permutation) each time it is used up, an ``hf`` stream is re-streamed with a
new shuffle seed. ``data.eval_documents`` documents of the first source are held out before training (a seeded
choice; the first ones of an ``hf`` stream) and packed into fixed evaluation batches.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...errors import PalimpsaError
from .seeds import EPOCH, EVAL, MIXTURE, SYNTHETIC, mix
from .sources import Reader, Segments, open_reader

if TYPE_CHECKING:
    from ..recipe import SourceSection


class Document(list):
    """A document's token ids (it is the list), ``targets``: None when every token is a training target, else one
    bool per token, True where the token carries loss (the answers of an answer-only synthetic document), and
    ``weight``: its targets' weight in the loss (its source's ``loss_weight``), or one weight per token (a source
    with an ``answer_weight``)."""

    def __init__(self, ids=(), targets: list[bool] | None = None, weight: float | list[float] = 1.0):
        super().__init__(ids)
        self.targets, self.weight = targets, weight


class DocumentSource:
    """A seeded weighted mixture of sources yielding token-id lists, one per document, EOS appended.

    ``holdout`` documents of the first source are set aside (``heldout``, token lists) and never yielded.
    Position: ``drawn`` (documents drawn so far, which also indexes the mixture's counter-based generator) and, per
    source, ``(epoch, position)`` in that epoch's order.
    """

    def __init__(self, sources: Sequence[SourceSection], tokenizer, *, seq_len: int, seed: int = 0,
                 vocab_size: int | None = None, holdout: int = 0, names: Sequence[str] | None = None):
        if not sources:
            raise PalimpsaError("no data sources: set data.path or data.sources")
        names = list(names) if names else [f"data.sources[{i}]" for i in range(len(sources))]
        self.tokenizer, self.seed, self.vocab_size = tokenizer, seed, vocab_size
        self.eos_id = None if tokenizer is None else tokenizer.eos_token_id
        self.pad_id = 0 if self.eos_id is None else self.eos_id
        if tokenizer is not None and vocab_size is not None and len(tokenizer) > vocab_size:
            raise PalimpsaError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary only "
                                f"{vocab_size}; use the model's tokenizer (unset data.tokenizer)")
        if tokenizer is None and any(s.type != "synthetic" or s.task != "mqar" for s in sources):
            raise PalimpsaError("text sources and synthetic passkey, niah, niah-fwpkm, repeat and mqar-gap documents "
                                "need a tokenizer; "
                                "set data.tokenizer")
        self.readers = [open_reader(s, f"{name} ({s.type})", tokenizer, seq_len, mix(seed, SYNTHETIC, i),
                                     vocab_size) for i, (s, name) in enumerate(zip(sources, names))]
        self.answer_only = [s.loss == "answer" for s in sources]
        self.loss_weights = [s.loss_weight for s in sources]
        self.answer_weights = [s.answer_weight for s in sources]
        weights = np.array([s.weight for s in sources], dtype=np.float64)
        self.cumulative = list(np.cumsum(weights / weights.sum()))
        self.excluded: list[np.ndarray | None] = [None] * len(self.readers)
        self.heldout: list[list[int]] = []
        if holdout:
            self._hold_out(holdout)
        self._orders: dict[int, tuple[int, np.ndarray]] = {}
        self._live: dict[int, tuple[int, int, Iterator[str]]] = {}
        self.drawn = 0
        self.cursors = [[0, 0] for _ in self.readers]
        self._empty_run = [0] * len(self.readers)  # consecutive empty documents per source (a guard, not state)

    def _hold_out(self, count: int) -> None:
        reader = self.readers[0]
        if not reader.finite:
            texts = reader.hold_out(count)
        else:
            if count >= len(reader):
                raise PalimpsaError(f"data.eval_documents ({count}) must be below the {len(reader)} documents of "
                                    f"{reader.label}, which needs at least one left for training; lower "
                                    "data.eval_documents or add data")
            chosen = np.random.default_rng(mix(self.seed, EVAL)).choice(len(reader), count, replace=False)
            self.excluded[0] = np.sort(chosen)
            texts = [reader.read(int(i)) for i in chosen]
        self.heldout = [ids for ids in (self._tokenise(t, reader, self.answer_only[0]) for t in texts if t) if ids]

    def __len__(self) -> int:
        """Documents per epoch over all finite sources (an hf stream counts as 0)."""
        return sum(len(r) - (0 if e is None else len(e)) for r, e in zip(self.readers, self.excluded) if r.finite)

    def sizes(self) -> list[int | None]:
        return [len(r) if r.finite else None for r in self.readers]

    def _tokenise(self, document: str | list[int] | Segments, reader: Reader, answer_only: bool = False,
                  answer_weight: float = 1.0) -> Document:
        """Token ids with EOS appended; for :data:`Segments` with ``answer_only``, the answers as the only targets,
        and with an ``answer_weight`` other than 1, the answer tokens weighing that much (``weight`` per token)."""
        if isinstance(document, list) and document and isinstance(document[0], tuple):
            if answer_only or answer_weight != 1.0:
                parts = [(self._ids(part), answer) for part, answer in document]
                ids = [t for part, _ in parts for t in part]
                answers = [answer for part, answer in parts for _ in part]
                checked = self._checked(ids, answers if answer_only else None, reader)
                if answer_weight != 1.0 and checked:
                    checked.weight = [answer_weight if a else 1.0 for a in answers]
                    checked.weight += [1.0] * (len(checked) - len(answers))  # the EOS
                return checked
            texts = [part for part, _ in document]
            document = "".join(texts) if isinstance(texts[0], str) else [t for part in texts for t in part]
        return self._checked(self._ids(document), None, reader)

    def _ids(self, part: str | list[int]) -> list[int]:
        if isinstance(part, str):
            return list(self.tokenizer(part, add_special_tokens=False, verbose=False)["input_ids"])
        return [int(t) for t in part]

    def _checked(self, ids: list[int], targets: list[bool] | None, reader: Reader) -> Document:
        if not ids:
            return Document()
        if self.vocab_size is not None and max(ids) >= self.vocab_size:
            raise PalimpsaError(f"{reader.label}: token id {max(ids)} is outside the model's vocabulary of "
                                f"{self.vocab_size}; use the model's tokenizer")
        eos = [] if self.eos_id is None else [self.eos_id]
        return Document(ids + eos, None if targets is None else targets + [False] * len(eos))

    def _order(self, index: int, epoch: int) -> np.ndarray:
        cached = self._orders.get(index)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        reader = self.readers[index]
        rng = np.random.default_rng(mix(self.seed, EPOCH, index, epoch))
        blocks = reader.blocks()
        if blocks is None:
            order = rng.permutation(len(reader))
        else:
            order = np.concatenate([start + rng.permutation(end - start)
                                    for start, end in (blocks[b] for b in rng.permutation(len(blocks)))])
        if self.excluded[index] is not None:
            order = order[~np.isin(order, self.excluded[index])]
        self._orders[index] = (epoch, order)
        return order

    def _next_item(self, index: int) -> tuple[int, int]:
        """Advance finite source ``index`` by one document: ``(document number, epoch)``."""
        cursor = self.cursors[index]
        order = self._order(index, cursor[0])
        if cursor[1] >= len(order):
            cursor[0], cursor[1] = cursor[0] + 1, 0
            order = self._order(index, cursor[0])
        cursor[1] += 1
        return int(order[cursor[1] - 1]), cursor[0]

    def _read_next(self, index: int) -> str | list[int] | None:
        reader, cursor = self.readers[index], self.cursors[index]
        if reader.finite:
            return reader.read(*self._next_item(index))
        for attempt in range(2):
            live = self._live.get(index)
            if live is None or live[:2] != (cursor[0], cursor[1]):
                live = (cursor[0], cursor[1], reader.stream(cursor[0], self.seed, cursor[1]))
            try:
                text = next(live[2])
            except StopIteration:
                if cursor[1] == 0 or attempt or self._empty_run[index] >= cursor[1]:
                    raise PalimpsaError(f"{reader.label}: {reader.where} yields no non-empty documents; check "
                                        "the split, text_field and data.eval_documents") from None
                cursor[0], cursor[1] = cursor[0] + 1, 0
                continue
            cursor[1] += 1
            self._live[index] = (cursor[0], cursor[1], live[2])
            return text
        raise AssertionError("unreachable")

    def _pick(self, counter: int) -> int:
        u = mix(self.seed, MIXTURE, counter) / float(1 << 64)
        return min(bisect.bisect_right(self.cumulative, u), len(self.readers) - 1)

    def next_document(self) -> Document:
        while True:
            index = self._pick(self.drawn)
            self.drawn += 1
            ids = self._document(index, self._read_next(index))
            if self.accept(index, ids):
                return ids

    def _document(self, index: int, document: str | list[int] | Segments | None) -> Document:
        if not document:
            return Document()
        ids = self._tokenise(document, self.readers[index], self.answer_only[index], self.answer_weights[index])
        weight = self.loss_weights[index]
        ids.weight = [weight * w for w in ids.weight] if isinstance(ids.weight, list) else weight
        return ids

    def accept(self, index: int, ids: Document) -> bool:
        """True for a document with tokens; an empty one is skipped, and a source that yields nothing else fails."""
        if ids:
            self._empty_run[index] = 0
            return True
        self._empty_run[index] += 1
        reader = self.readers[index]
        if reader.finite and self._empty_run[index] > len(reader):
            raise PalimpsaError(f"{reader.label}: every document is empty; add text or point it elsewhere")
        return False

    # -- documents made elsewhere (data.workers): where the next one is, and making it from there -------------------

    @property
    def addressable(self) -> bool:
        """Whether every source is finite, so that a document can be made from its address alone."""
        return all(reader.finite for reader in self.readers)

    def next_address(self) -> tuple[int, int, int]:
        """Advance by one document without making it: ``(source, document number, epoch)``, which
        :meth:`document_from` turns into the document that :meth:`next_document` would have returned (or an empty
        one, which :meth:`accept` skips). Finite sources only (:attr:`addressable`)."""
        index = self._pick(self.drawn)
        self.drawn += 1
        return (index, *self._next_item(index))

    def document_from(self, address: tuple[int, int, int]) -> Document:
        index, number, epoch = address
        return self._document(index, self.readers[index].read(number, epoch))

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            yield self.next_document()

    def state_dict(self) -> dict:
        return {"drawn": self.drawn, "cursors": [list(c) for c in self.cursors], "sizes": self.sizes()}

    def load_state_dict(self, state: dict) -> None:
        if len(state["cursors"]) != len(self.readers):
            raise PalimpsaError(f"the saved data position has {len(state['cursors'])} sources but the recipe has "
                                f"{len(self.readers)}; resume with the data the run started with")
        for reader, before, now in zip(self.readers, state.get("sizes", self.sizes()), self.sizes()):
            if before != now:
                raise PalimpsaError(f"{reader.label} had {before} documents when the position was saved and has "
                                    f"{now} now; resume with the data the run started with")
        self.drawn = int(state["drawn"])
        self.cursors = [[int(e), int(p)] for e, p in state["cursors"]]

    def document_at(self, state: dict) -> Document:
        """The document that ``next_document`` returns from position ``state``; the current position is kept."""
        saved = self.state_dict()
        self.load_state_dict(state)
        try:
            return self.next_document()
        finally:
            self.load_state_dict(saved)
