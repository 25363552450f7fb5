"""Fine-tuning data: sources -> a seeded weighted mixture of tokenised documents -> packed or state-passing batches.

Sources (``data.sources``, or ``data.path`` for one local source):

- ``text``: a ``.txt`` file, or a directory searched recursively for ``.txt`` / ``.text`` / ``.md`` files (hidden
  paths skipped). **One file is one document.** A file larger than ``TEXT_DOCUMENT_MAX_BYTES`` (8 MiB) is cut into
  several documents of at most about that size, each cut at the first blank line (else newline) after a multiple of
  the limit, so a huge concatenated corpus never has to be tokenised in one piece. To give many small documents in
  one file, use jsonl.
- ``jsonl``: a file, or a directory of ``.jsonl`` / ``.json`` files; one JSON object per line, the text in
  ``text_field``. Every line is checked when the source is opened (a bad line is an error naming the file and the
  line); blank lines and empty texts are skipped.
- ``parquet``: a file or a directory of ``.parquet`` files, column ``text_field`` (needs pyarrow).
- ``hf``: a Hugging Face dataset by name (``name``, ``config``, ``split``), streamed with ``datasets``.
- ``pydoc``: Python's own documentation text (``pydoc_data.topics``, one document per topic), always installed.
- ``stdlib``: the source of Python's standard library, one document per ``.py`` file (test suites, ``idlelib``,
  ``lib2to3``, ``site-packages`` and caches left out), in sorted path order; about 12 MB on Python 3.11. Always
  installed, so a from-scratch pretraining corpus needs no download; it depends on the Python version.
- ``synthetic``: ``documents`` seeded documents per epoch from :mod:`palimpsa.upgrade.evaluate.tasks`, generated on
  demand and new in every epoch (the seed includes the epoch), so repeated epochs never repeat a document: passkey
  and niah (0 to 3 distractor needles) as ``prompt + " " + answer`` text of ``seq_len // 4`` to ``seq_len - 16``
  tokens (at least 64); mqar as token ids (``k v`` pairs then the queried keys each followed by its value) of at
  most ``seq_len`` tokens, drawn from the tokenizer's range below the model's vocabulary, special tokens left out;
  mqar-gap as token ids (up to 32 pairs, a gap of haystack text, then every key queried) of ``4 * pairs`` to
  ``seq_len - 1`` tokens, keys and values drawn from the ids the haystack never uses.

Every document is tokenised with no special tokens, then the tokenizer's EOS (when it has one) is appended.
:class:`DocumentSource` draws the source of each next document by weight with a counter-based seeded generator; a
finite source reshuffles (a new seeded permutation) each time it is used up, an ``hf`` stream is re-streamed with a
new shuffle seed. ``data.eval_documents`` documents of the first source are held out before training (a seeded
choice; the first ones of an ``hf`` stream) and packed into fixed evaluation batches.

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

import bisect
import json
import random
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import PalimpsaError

if TYPE_CHECKING:
    from .recipe import DataSection, SourceSection

__all__ = ["Batch", "DocumentSource", "Prefetcher", "TokenStream", "build_data", "pack_documents",
           "TEXT_DOCUMENT_MAX_BYTES"]

TEXT_DOCUMENT_MAX_BYTES = 8 << 20  # a text file larger than this is cut into several documents
TEXT_SUFFIXES = (".txt", ".text", ".md")
JSONL_SUFFIXES = (".jsonl", ".json")
HF_SHUFFLE_BUFFER = 10_000
STATE_FORMAT = 1
_BLANK_LINES = re.compile(rb"\n(?:[ \t\r]*\n)+")
_MASK = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _mix(*values: int) -> int:
    """A 64-bit seed from integers (counter-based, the same on every platform and Python version)."""
    h = 0x243F6A8885A308D3
    for value in values:
        h = _splitmix(h ^ (value & _MASK))
    return h


_EVAL, _MIXTURE, _EPOCH, _SYNTHETIC, _HF = 1, 2, 3, 4, 5  # stream tags for _mix


@dataclass
class Batch:
    """One micro-batch. Packed: ``[1, batch_size * seq_len]`` with ``cu_seqlens``; state passing:
    ``[batch_size, seq_len]`` with ``continues``. ``labels`` is -100 where there is no target (the first token of
    every piece, padding, and the non-answer tokens of answer-only documents); the model shifts labels by one, so
    ``labels[t]`` is predicted at ``t - 1``. ``tokens`` counts the targets, ``input_tokens`` the positions that hold
    a document token (what throughput counts)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    cu_seqlens: torch.Tensor | None
    continues: torch.Tensor | None
    tokens: int
    input_tokens: int

    def to(self, device) -> Batch:
        move = (lambda t: None if t is None else t.to(device))  # noqa: E731
        return Batch(move(self.input_ids), move(self.labels), move(self.cu_seqlens), move(self.continues),
                     self.tokens, self.input_tokens)


class Document(list):
    """A document's token ids (it is the list) and ``targets``: None when every token is a training target, else one
    bool per token, True where the token carries loss (the answers of an answer-only synthetic document)."""

    def __init__(self, ids=(), targets: list[bool] | None = None):
        super().__init__(ids)
        self.targets = targets


Segments = list[tuple[str | list[int], bool]]
"""A synthetic document as consecutive parts (text or token ids), each marked True when it is an answer."""


# ----------------------------------------------------------------------------------------------------------------
# Readers: one per source. A finite reader gives random access to its documents (``read(i)``: text, token ids, or
# None for an empty one); a streaming reader (hf) gives iterators.


class _Reader:
    finite = True
    label = "source"

    def __len__(self) -> int:
        raise NotImplementedError

    def read(self, index: int, epoch: int = 0) -> str | list[int] | Segments | None:
        """Document ``index``; only generated sources (synthetic, which returns :data:`Segments`) depend on
        ``epoch``."""
        raise NotImplementedError

    def blocks(self) -> list[tuple[int, int]] | None:
        """Contiguous index ranges to keep together when shuffling (cheap sequential reads), or None."""
        return None


def _files(path: Path, suffixes: tuple[str, ...], label: str, kind: str) -> list[Path]:
    if not path.exists():
        raise PalimpsaError(f"{label}: {path} does not exist; point it at a {kind} file or a directory of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise PalimpsaError(f"{label}: no {' / '.join(suffixes)} files under {path}; point it at a {kind} file "
                            "or a directory that holds some")
    return files


def _text_pieces(path: Path, limit: int) -> list[tuple[int, int]]:
    """Byte ranges of the documents of one text file (see the module docstring)."""
    size = path.stat().st_size
    if size <= limit:
        return [(0, size)] if size else []
    cuts = [0]
    with open(path, "rb") as handle:
        nominal = limit
        while nominal < size:
            handle.seek(nominal)
            window = handle.read(min(limit, 1 << 20))
            match = _BLANK_LINES.search(window)
            if match:
                cut = nominal + match.end()
            elif (newline := window.find(b"\n")) >= 0:
                cut = nominal + newline + 1
            else:  # no line break: cut at a UTF-8 character boundary
                skip = 0
                while skip < len(window) and window[skip] & 0xC0 == 0x80:
                    skip += 1
                cut = nominal + skip
            if cuts[-1] < cut < size:
                cuts.append(cut)
            nominal += limit
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


class _TextReader(_Reader):
    def __init__(self, path: Path, label: str):
        self.label = label
        self.files = _files(path, TEXT_SUFFIXES, label, "text")
        self.docs: list[tuple[int, int, int]] = []
        for number, file in enumerate(self.files):
            self.docs.extend((number, start, end) for start, end in _text_pieces(file, TEXT_DOCUMENT_MAX_BYTES))
        if not self.docs:
            raise PalimpsaError(f"{label}: {path} holds no documents (every text file is empty); add text or "
                                "point it elsewhere")

    def __len__(self) -> int:
        return len(self.docs)

    def read(self, index: int, epoch: int = 0) -> str | None:
        number, start, end = self.docs[index]
        with open(self.files[number], "rb") as handle:
            handle.seek(start)
            text = handle.read(end - start).decode("utf-8", errors="replace")
        return text or None


def _jsonl_text(line: bytes, file: Path, line_number: int, field: str, label: str) -> str:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        reason = getattr(error, "msg", str(error))
        raise PalimpsaError(f"{file}, line {line_number}: not valid JSON ({reason}); a jsonl source ({label}) needs "
                            "one JSON object per line") from None
    if not isinstance(record, dict) or field not in record:
        has = f"it has: {', '.join(map(str, record))}" if isinstance(record, dict) else "it is not an object"
        raise PalimpsaError(f"{file}, line {line_number}: no field {field!r} ({has}); set text_field of {label} "
                            "to the field that holds the text")
    text = record[field]
    if text is not None and not isinstance(text, str):
        raise PalimpsaError(f"{file}, line {line_number}: field {field!r} is a {type(text).__name__}, not text; "
                            f"set text_field of {label} to a text field")
    return text or ""


class _JsonlReader(_Reader):
    def __init__(self, path: Path, field: str, label: str):
        self.label, self.field = label, field
        self.files = _files(path, JSONL_SUFFIXES, label, "jsonl")
        self.file_numbers, self.offsets = array("l"), array("q")
        for number, file in enumerate(self.files):
            with open(file, "rb") as handle:
                offset = 0
                for line_number, line in enumerate(handle, 1):
                    if line.strip() and _jsonl_text(line, file, line_number, field, label):
                        self.file_numbers.append(number)
                        self.offsets.append(offset)
                    offset += len(line)
        if not self.offsets:
            raise PalimpsaError(f"{label}: {path} holds no documents (no line with a non-empty {field!r}); add "
                                "data or point it elsewhere")

    def __len__(self) -> int:
        return len(self.offsets)

    def read(self, index: int, epoch: int = 0) -> str | None:
        with open(self.files[self.file_numbers[index]], "rb") as handle:
            handle.seek(self.offsets[index])
            line = handle.readline()
        return json.loads(line)[self.field] or None


class _ParquetReader(_Reader):
    def __init__(self, path: Path, field: str, label: str):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise PalimpsaError(f"{label}: parquet sources need pyarrow: pip install pyarrow") from None
        self.label, self.field = label, field
        self.files = _files(path, (".parquet",), label, "parquet")
        self.handles, self.starts, self.groups = [], [], []  # groups: (file number, row group)
        total = 0
        for number, file in enumerate(self.files):
            try:
                handle = pq.ParquetFile(file)
            except Exception as error:  # pyarrow raises several types for a damaged file
                raise PalimpsaError(f"{file}: cannot read it as parquet ({error})") from None
            names = handle.schema_arrow.names
            if field not in names:
                raise PalimpsaError(f"{file}: no column {field!r} (columns: {', '.join(names)}); set text_field of "
                                    f"{label} to the column that holds the text")
            self.handles.append(handle)
            for group in range(handle.num_row_groups):
                rows = handle.metadata.row_group(group).num_rows
                if rows:
                    self.starts.append(total)
                    self.groups.append((number, group))
                    total += rows
        self.total = total
        self._cached: tuple[int, list] | None = None
        if not total:
            raise PalimpsaError(f"{label}: {path} holds no documents (no rows); add data or point it elsewhere")

    def __len__(self) -> int:
        return self.total

    def blocks(self) -> list[tuple[int, int]]:
        return list(zip(self.starts, self.starts[1:] + [self.total]))

    def read(self, index: int, epoch: int = 0) -> str | None:
        block = bisect.bisect_right(self.starts, index) - 1
        if self._cached is None or self._cached[0] != block:
            number, group = self.groups[block]
            table = self.handles[number].read_row_group(group, columns=[self.field])
            self._cached = (block, table.column(0).to_pylist())
        text = self._cached[1][index - self.starts[block]]
        if text is not None and not isinstance(text, str):
            raise PalimpsaError(f"{self.files[self.groups[block][0]]}: column {self.field!r} holds "
                                f"{type(text).__name__}, not text; set text_field of {self.label} to a text column")
        return text or None


class _PydocReader(_Reader):
    """Python's own documentation text (``pydoc_data.topics``), one document per topic, in sorted topic order."""

    def __init__(self, label: str):
        from pydoc_data.topics import topics

        self.label = label
        self.texts = [topics[name] for name in sorted(topics) if topics[name].strip()]

    def __len__(self) -> int:
        return len(self.texts)

    def read(self, index: int, epoch: int = 0) -> str:
        return self.texts[index]


STDLIB_SKIP = frozenset({"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages", "dist-packages",
                         "__pycache__", "__phello__"})


class _StdlibReader(_Reader):
    """The standard library's ``.py`` files (see ``STDLIB_SKIP``), one document per file, sorted by path."""

    def __init__(self, label: str):
        import sysconfig

        self.label = label
        root = Path(sysconfig.get_paths()["stdlib"])
        self.files = [p for p in sorted(root.rglob("*.py"))
                      if not set(p.relative_to(root).parts[:-1]) & STDLIB_SKIP]
        if not self.files:
            raise PalimpsaError(f"{label}: no Python sources found under {root}; use another source")

    def __len__(self) -> int:
        return len(self.files)

    def read(self, index: int, epoch: int = 0) -> str:
        return self.files[index].read_bytes().decode("utf-8", errors="replace")


class _SyntheticReader(_Reader):
    def __init__(self, section: SourceSection, tokenizer, seq_len: int, seed: int, vocab_size: int | None,
                 label: str):
        self.label, self.task, self.count = label, section.task, section.documents
        self.tokenizer, self.seq_len, self.seed = tokenizer, seq_len, seed
        if self.task == "mqar-gap":
            if tokenizer is None:
                raise PalimpsaError(f"{label}: mqar-gap documents need a tokenizer (their gap is haystack text)")
            from ..evaluate.tasks import mqar_gap_setup

            self.filler, self.keys, self.values = mqar_gap_setup(tokenizer, vocab_size)
            self.max_pairs = min(len(self.keys), len(self.values), 32, max(1, (seq_len - 1) // 4))
            if self.max_pairs < 1:
                raise PalimpsaError(f"{label}: no token ids outside the haystack are left for mqar-gap keys")
        elif self.task == "mqar":
            if tokenizer is None and vocab_size is None:
                raise PalimpsaError(f"{label}: mqar needs the model's vocab_size or a tokenizer")
            from ..evaluate.tasks import mqar_token_range

            self.low, self.high = mqar_token_range(tokenizer, vocab_size)
            self.max_pairs = min((self.high - self.low) // 2, max(1, (seq_len - 1) // 4))
            if self.max_pairs < 1:
                raise PalimpsaError(f"{label}: the vocabulary [{self.low}, {self.high}) is too small for mqar")
        elif tokenizer is None:
            raise PalimpsaError(f"{label}: {self.task} documents are text and need a tokenizer")

    def __len__(self) -> int:
        return self.count

    def read(self, index: int, epoch: int = 0) -> Segments:
        from ..evaluate.tasks import mqar_gap_samples, mqar_samples, niah_samples, passkey_samples

        rng = random.Random(_mix(self.seed, index) if epoch == 0 else _mix(self.seed, index, epoch))
        sample_seed = rng.randrange(1 << 31)
        if self.task == "mqar-gap":
            pairs = rng.randint(max(1, self.max_pairs // 4), self.max_pairs)
            length = rng.randint(4 * pairs, max(4 * pairs, self.seq_len - 1))
            return _answer_segments(mqar_gap_samples(self.filler, self.keys, self.values, [length], pairs, pairs, 1,
                                                     sample_seed)[0])
        if self.task == "mqar":
            pairs = rng.randint(max(1, self.max_pairs // 4), self.max_pairs)
            return _answer_segments(mqar_samples(self.high, [pairs], pairs, 1, sample_seed, reserved=self.low)[0])
        length = rng.randint(min(max(64, self.seq_len // 4), max(64, self.seq_len - 16)), max(64, self.seq_len - 16))
        depth = rng.random()
        if self.task == "passkey":
            sample = passkey_samples(self.tokenizer, [length], [depth], 1, sample_seed)[0]
        else:
            sample = niah_samples(self.tokenizer, [length], [depth], 1, sample_seed, distractors=rng.randint(0, 3))[0]
        return [(sample.prompt, False), (" " + sample.answer, True)]


def _answer_segments(sample) -> Segments:
    """An MQAR sample's ids as segments, each queried value (the token after a target position) an answer."""
    segments: Segments = []
    start = 0
    for position in sample.target_positions:
        segments.append((sample.input_ids[start : position + 1], False))
        segments.append((sample.input_ids[position + 1 : position + 2], True))
        start = position + 2
    if start < len(sample.input_ids):
        segments.append((sample.input_ids[start:], False))
    return segments


class _HFReader(_Reader):
    finite = False

    def __init__(self, section: SourceSection, label: str):
        try:
            import datasets
        except ImportError:
            raise PalimpsaError(f"{label}: Hugging Face sources need the datasets package: pip install datasets"
                                ) from None
        self.label, self.field = label, section.text_field
        where = f"{section.name!r}" + (f" (config {section.config!r})" if section.config else "") + \
            f", split {section.split!r}"
        try:
            self.dataset = datasets.load_dataset(section.name, section.config, split=section.split, streaming=True)
        except Exception as error:  # offline, unknown name, bad config or split: datasets raises many types
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PalimpsaError(f"{label}: cannot open Hugging Face dataset {where}: {first}; check the name, "
                                "config and split, and that you are online (HF_HUB_OFFLINE unset)") from None
        self.where, self.skip_head = where, 0

    def _text(self, example, position: int) -> str:
        if not isinstance(example, dict) or self.field not in example:
            fields = ", ".join(example) if isinstance(example, dict) else type(example).__name__
            raise PalimpsaError(f"{self.label}: example {position} of {self.where} has no field {self.field!r} "
                                f"(it has: {fields}); set text_field to the field that holds the text")
        text = example[self.field]
        if text is not None and not isinstance(text, str):
            raise PalimpsaError(f"{self.label}: field {self.field!r} of {self.where} is not text; set text_field")
        return text or ""

    def hold_out(self, count: int) -> list[str]:
        """The first ``count`` non-empty texts of the stream; training then streams what follows them."""
        texts: list[str] = []
        consumed = 0
        examples = iter(self.dataset)
        while len(texts) < count:
            example = next(examples, None)
            if example is None:
                raise PalimpsaError(f"data.eval_documents ({count}) must be below the documents of {self.label} "
                                    f"({len(texts)} found in {self.where}); lower data.eval_documents")
            text = self._text(example, consumed)
            consumed += 1
            if text:
                texts.append(text)
        self.skip_head = consumed
        return texts

    def stream(self, epoch: int, seed: int, skip: int) -> Iterator[str]:
        dataset = self.dataset.skip(self.skip_head) if self.skip_head else self.dataset
        dataset = dataset.shuffle(seed=_mix(seed, _HF, epoch) % (1 << 32), buffer_size=HF_SHUFFLE_BUFFER)
        for position, example in enumerate(islice(dataset, skip, None), skip):
            yield self._text(example, position)


def _open_reader(section: SourceSection, label: str, tokenizer, seq_len: int, seed: int,
                 vocab_size: int | None) -> _Reader:
    if section.type == "text":
        return _TextReader(Path(section.path).expanduser(), label)
    if section.type == "jsonl":
        return _JsonlReader(Path(section.path).expanduser(), section.text_field, label)
    if section.type == "parquet":
        return _ParquetReader(Path(section.path).expanduser(), section.text_field, label)
    if section.type == "hf":
        return _HFReader(section, label)
    if section.type == "pydoc":
        return _PydocReader(label)
    if section.type == "stdlib":
        return _StdlibReader(label)
    return _SyntheticReader(section, tokenizer, seq_len, seed, vocab_size, label)


# ----------------------------------------------------------------------------------------------------------------


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
            raise PalimpsaError("text sources and synthetic passkey, niah and mqar-gap documents need a tokenizer; "
                                "set data.tokenizer")
        self.readers = [_open_reader(s, f"{name} ({s.type})", tokenizer, seq_len, _mix(seed, _SYNTHETIC, i),
                                     vocab_size) for i, (s, name) in enumerate(zip(sources, names))]
        self.answer_only = [s.loss == "answer" for s in sources]
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
            chosen = np.random.default_rng(_mix(self.seed, _EVAL)).choice(len(reader), count, replace=False)
            self.excluded[0] = np.sort(chosen)
            texts = [reader.read(int(i)) for i in chosen]
        self.heldout = [ids for ids in (self._tokenise(t, reader, self.answer_only[0]) for t in texts if t) if ids]

    def __len__(self) -> int:
        """Documents per epoch over all finite sources (an hf stream counts as 0)."""
        return sum(len(r) - (0 if e is None else len(e)) for r, e in zip(self.readers, self.excluded) if r.finite)

    def sizes(self) -> list[int | None]:
        return [len(r) if r.finite else None for r in self.readers]

    def _tokenise(self, document: str | list[int] | Segments, reader: _Reader, answer_only: bool = False) -> Document:
        """Token ids with EOS appended; for :data:`Segments` with ``answer_only``, the answers as the only targets."""
        if isinstance(document, list) and document and isinstance(document[0], tuple):
            if answer_only:
                parts = [(self._ids(part), answer) for part, answer in document]
                ids = [t for part, _ in parts for t in part]
                targets = [answer for part, answer in parts for _ in part]
                return self._checked(ids, targets, reader)
            texts = [part for part, _ in document]
            document = "".join(texts) if isinstance(texts[0], str) else [t for part in texts for t in part]
        return self._checked(self._ids(document), None, reader)

    def _ids(self, part: str | list[int]) -> list[int]:
        if isinstance(part, str):
            return list(self.tokenizer(part, add_special_tokens=False, verbose=False)["input_ids"])
        return [int(t) for t in part]

    def _checked(self, ids: list[int], targets: list[bool] | None, reader: _Reader) -> Document:
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
        rng = np.random.default_rng(_mix(self.seed, _EPOCH, index, epoch))
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

    def _read_next(self, index: int) -> str | list[int] | None:
        reader, cursor = self.readers[index], self.cursors[index]
        if reader.finite:
            order = self._order(index, cursor[0])
            if cursor[1] >= len(order):
                cursor[0], cursor[1] = cursor[0] + 1, 0
                order = self._order(index, cursor[0])
            cursor[1] += 1
            return reader.read(int(order[cursor[1] - 1]), cursor[0])
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
        u = _mix(self.seed, _MIXTURE, counter) / float(1 << 64)
        return min(bisect.bisect_right(self.cumulative, u), len(self.readers) - 1)

    def next_document(self) -> Document:
        while True:
            index = self._pick(self.drawn)
            self.drawn += 1
            document = self._read_next(index)
            ids = self._tokenise(document, self.readers[index], self.answer_only[index]) if document else []
            if ids:
                self._empty_run[index] = 0
                return ids
            self._empty_run[index] += 1
            reader = self.readers[index]
            if reader.finite and self._empty_run[index] > len(reader):
                raise PalimpsaError(f"{reader.label}: every document is empty; add text or point it elsewhere")

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


# ----------------------------------------------------------------------------------------------------------------


def _place(ids: list[int], labels: list[int], doc: list[int], start: int, end: int) -> None:
    """Append ``doc[start:end]`` as a new piece. Its first token is no target (nothing in the piece predicts it);
    the others are, unless ``doc`` is a :class:`Document` whose ``targets`` leave them out."""
    piece = doc[start:end]
    ids.extend(piece)
    labels.append(-100)
    targets = getattr(doc, "targets", None)
    if targets is None:
        labels.extend(piece[1:])
    else:
        labels.extend(token if keep else -100 for token, keep in zip(piece[1:], targets[start + 1 : end]))


def _packed_batch(ids: list[int], labels: list[int], starts: list[int], input_tokens: int) -> Batch:
    tokens = sum(1 for label in labels if label != -100)
    return Batch(torch.tensor([ids], dtype=torch.long), torch.tensor([labels], dtype=torch.long),
                 torch.tensor(starts + [len(ids)], dtype=torch.long), None, tokens, input_tokens)


class TokenStream:
    """An infinite, resumable stream of :class:`Batch` es over a :class:`DocumentSource` (see the module
    docstring for the two modes)."""

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
        total, length = self.batch_size * self.seq_len, self.seq_len
        ids: list[int] = []
        labels: list[int] = []
        starts: list[int] = []
        while len(ids) < total:
            current = self._current
            if current is None or current["offset"] >= len(current["doc"]):
                current = self._current = self._fetch()
            take = min((len(ids) // length + 1) * length - len(ids), len(current["doc"]) - current["offset"])
            starts.append(len(ids))
            _place(ids, labels, current["doc"], current["offset"], current["offset"] + take)
            current["offset"] += take
        return _packed_batch(ids, labels, starts, len(ids))

    def _next_rows(self) -> Batch:
        length = self.seq_len
        ids = torch.full((self.batch_size, length), self.pad_id, dtype=torch.long)
        labels = torch.full((self.batch_size, length), -100, dtype=torch.long)
        continues = torch.zeros(self.batch_size, dtype=torch.bool)
        input_tokens = 0
        for r in range(self.batch_size):
            row = self._rows[r]
            if row is not None and row["offset"] < len(row["doc"]):
                continues[r] = True
            else:
                row = self._rows[r] = self._fetch()
            start = row["offset"]
            piece = row["doc"][start : start + length]
            row["offset"] += len(piece)
            input_tokens += len(piece)
            ids[r, : len(piece)] = torch.tensor(piece, dtype=torch.long)
            labels[r, 1 : len(piece)] = ids[r, 1 : len(piece)]
            targets = getattr(row["doc"], "targets", None)
            if targets is not None:
                keep = torch.tensor(targets[start + 1 : start + len(piece)], dtype=torch.bool)
                labels[r, 1 : len(piece)][~keep] = -100
        return Batch(ids, labels, None, continues, int((labels != -100).sum()), input_tokens)

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


class Prefetcher:
    """Makes the batches of a :class:`TokenStream` on a background thread, ``depth`` ahead, so tokenising and
    generating documents overlaps the accelerator's work. ``state_dict()`` is the stream's position after the last
    batch handed out (not after the ones made ahead), so a checkpoint resumes exactly where training stands. An
    error on the thread is raised by the ``next()`` that would have returned its batch."""

    def __init__(self, stream: TokenStream, depth: int = 4):
        import queue
        import threading

        self.stream, self._state = stream, stream.state_dict()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="palimpsa-data", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        import queue

        while not self._stop.is_set():
            try:
                item = (next(self.stream), self.stream.state_dict(), None)
            except BaseException as error:  # handed to the consumer, which raises it
                item = (None, None, error)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Batch:
        batch, state, error = self._queue.get()
        if error is not None:
            raise error
        self._state = state
        return batch

    def state_dict(self) -> dict:
        return self._state

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def pack_documents(documents: Sequence[list[int]], seq_len: int, batch_size: int, pad_id: int = 0,
                   max_batches: int | None = None) -> list[Batch]:
    """Packed batches over ``documents`` in order, once (evaluation): the last batch may have fewer rows, its last
    row padded (a piece of its own, labels -100)."""
    batches: list[Batch] = []
    total = seq_len * batch_size
    ids: list[int] = []
    labels: list[int] = []
    starts: list[int] = []
    for doc in documents:
        offset = 0
        while offset < len(doc):
            if len(ids) == total:
                batches.append(_packed_batch(ids, labels, starts, len(ids)))
                ids, labels, starts = [], [], []
                if max_batches is not None and len(batches) >= max_batches:
                    return batches
            take = min((len(ids) // seq_len + 1) * seq_len - len(ids), len(doc) - offset)
            starts.append(len(ids))
            _place(ids, labels, doc, offset, offset + take)
            offset += take
    if ids:
        input_tokens = len(ids)
        if len(ids) % seq_len:
            starts.append(len(ids))
            padding = seq_len - len(ids) % seq_len
            ids.extend([pad_id] * padding)
            labels.extend([-100] * padding)
        batches.append(_packed_batch(ids, labels, starts, input_tokens))
    return batches


def build_data(data: DataSection, tokenizer, *, vocab_size: int | None = None,
               max_eval_batches: int | None = None) -> tuple[TokenStream, list[Batch]]:
    """Train stream and a fixed list of held-out evaluation batches (from ``data.eval_documents`` documents taken
    out of the first source before training; packed mode, no state passing)."""
    sources = data.resolved_sources()
    names = ["data.path"] if data.path and not data.sources else None
    documents = DocumentSource(sources, tokenizer, seq_len=data.seq_len, seed=data.seed, vocab_size=vocab_size,
                               holdout=data.eval_documents, names=names)
    stream = TokenStream(documents, data.seq_len, data.batch_size, state_passing=data.state_passing)
    eval_batches = pack_documents(documents.heldout, data.seq_len, data.batch_size, documents.pad_id,
                                  max_batches=max_eval_batches)
    return stream, eval_batches
