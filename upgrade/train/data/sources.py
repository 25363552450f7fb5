"""Readers of the document sources (``data.sources``, or ``data.path`` for one local source):

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
  demand and new in every epoch (the seed includes the epoch), so repeated epochs never repeat a document: passkey,
  niah (0 to 3 distractor needles), niah-fwpkm (five 4-character keys with 6-digit values in the standard library's
  docstrings; ``needles: [low, high]`` draws their number uniformly from that range instead; ``queries: [low,
  high]`` asks that many of them in turn at the end, each question followed by its answer, all answers in the
  loss) and repeat (a
  24-character string to repeat after a gap of docstrings) as ``prompt + " " + answer``
  text of ``seq_len // 4`` to ``seq_len - 16`` tokens (at least 64; longer where the needles and questions alone
  take more, which the source checks against ``seq_len`` when it opens); mqar as token ids (``k v`` pairs then the
  queried keys each followed by its value) of at most ``seq_len`` tokens, drawn from the tokenizer's range below
  the model's vocabulary, special tokens left out; mqar-gap as token ids (up to 32 pairs, a gap of haystack text,
  then every key queried) of ``4 * pairs`` to ``seq_len - 1`` tokens, keys and values drawn from the ids the
  haystack never uses. ``pairs: [low, high]`` draws mqar and mqar-gap's pairs log-uniformly from that range.

A finite reader gives random access to its documents (``read(i)``: text, token ids, or :data:`Segments`; None for an
empty one); a streaming reader (``hf``) gives iterators.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import re
from array import array
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import PalimpsaError
from ...evaluate.tasks import (
    FWPKM_NEEDLE,
    FWPKM_NEEDLES,
    FWPKM_QUESTION,
    docstring_text,
    fwpkm_niah_queries,
    fwpkm_niah_samples,
    mqar_gap_samples,
    mqar_gap_setup,
    mqar_samples,
    mqar_token_range,
    niah_samples,
    passkey_samples,
    repeat_samples,
)
from .seeds import HF, mix

if TYPE_CHECKING:
    from ..recipe import SourceSection

TEXT_DOCUMENT_MAX_BYTES = 8 << 20  # a text file larger than this is cut into several documents
TEXT_SUFFIXES = (".txt", ".text", ".md")
JSONL_SUFFIXES = (".jsonl", ".json")
HF_SHUFFLE_BUFFER = 10_000
_BLANK_LINES = re.compile(rb"\n(?:[ \t\r]*\n)+")

Segments = list[tuple[str | list[int], bool]]
"""A synthetic document as consecutive parts (text or token ids), each marked True when it is an answer."""

# None for an empty one); a streaming reader (hf) gives iterators.


class Reader:
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


class _TextReader(Reader):
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


class _JsonlReader(Reader):
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


class _ParquetReader(Reader):
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


class _PydocReader(Reader):
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


class _StdlibReader(Reader):
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


class _SyntheticReader(Reader):
    def __init__(self, section: SourceSection, tokenizer, seq_len: int, seed: int, vocab_size: int | None,
                 label: str):
        self.label, self.task, self.count = label, section.task, section.documents
        self.tokenizer, self.seq_len, self.seed = tokenizer, seq_len, seed
        self.pairs, self.needles, self.queries = section.pairs, section.needles, section.queries
        if self.task == "mqar-gap":
            if tokenizer is None:
                raise PalimpsaError(f"{label}: mqar-gap documents need a tokenizer (their gap is haystack text)")
            self.filler, self.keys, self.values = mqar_gap_setup(tokenizer, vocab_size)
            self.max_pairs = min(len(self.keys), len(self.values), 32, max(1, (seq_len - 1) // 4))
            if self.max_pairs < 1:
                raise PalimpsaError(f"{label}: no token ids outside the haystack are left for mqar-gap keys")
        elif self.task == "mqar":
            if tokenizer is None and vocab_size is None:
                raise PalimpsaError(f"{label}: mqar needs the model's vocab_size or a tokenizer")
            self.low, self.high = mqar_token_range(tokenizer, vocab_size)
            self.max_pairs = min((self.high - self.low) // 2, max(1, (seq_len - 1) // 4))
            if self.max_pairs < 1:
                raise PalimpsaError(f"{label}: the vocabulary [{self.low}, {self.high}) is too small for mqar")
        elif tokenizer is None:
            raise PalimpsaError(f"{label}: {self.task} documents are text and need a tokenizer")
        if self.task == "niah-fwpkm" and (self.needles is not None or self.queries is not None):
            # the needles and the questions alone must fit the longest document, or a question lands in
            # another row than the needles it asks about
            def count(text: str) -> int:
                return len(tokenizer(text, add_special_tokens=False)["input_ids"])

            needle = count(FWPKM_NEEDLE.format(key="ABCD", value="123456"))
            question = count(FWPKM_QUESTION.format(key="ABCD") + " 123456")  # with its answer; a later one opens
            # with a "."; a document always keeps one haystack piece (under 65 bytes: >= 40 characters cut at a
            # space, words of at most 24) and ends with the end-of-text token
            room = seq_len - 65 - 1
            most = (self.needles or (FWPKM_NEEDLES, FWPKM_NEEDLES))[1]
            named = f"needles {list(self.needles)}" if self.needles else f"the default {FWPKM_NEEDLES} needles"
            if self.queries is not None and self.queries[0] > most:
                raise PalimpsaError(f"{label}: queries {list(self.queries)} asks more questions than the at most "
                                    f"{most} needles of a document ({named}); lower queries or raise needles")
            asked = min(most, (self.queries or (1, 1))[1])
            fit = max(0, (room - question) // needle)
            if most > fit:
                raise PalimpsaError(f"{label}: {named} is more than the {fit} needles that fit in seq_len {seq_len} "
                                    "with a question; lower needles or raise seq_len")
            if most * needle + asked * (question + 1) - 1 > room:
                raise PalimpsaError(f"{label}: {most} needles with queries {list(self.queries)} do not fit in "
                                    f"seq_len {seq_len} ({most * needle + asked * (question + 1) - 1} of {room} "
                                    "tokens for the needles and questions); lower queries or needles")
        if self.pairs is not None and self.pairs[0] > self.max_pairs:
            raise PalimpsaError(f"{label}: pairs {list(self.pairs)} asks for more than the {self.max_pairs} pairs "
                                f"that fit in seq_len {seq_len} (and the free token ids); lower pairs")

    def __len__(self) -> int:
        return self.count

    def read(self, index: int, epoch: int = 0) -> Segments:
        rng = random.Random(mix(self.seed, index) if epoch == 0 else mix(self.seed, index, epoch))
        sample_seed = rng.randrange(1 << 31)
        if self.task == "mqar-gap":
            pairs = self._pairs(rng)
            length = rng.randint(4 * pairs, max(4 * pairs, self.seq_len - 1))
            return _answer_segments(mqar_gap_samples(self.filler, self.keys, self.values, [length], pairs, pairs, 1,
                                                     sample_seed)[0])
        if self.task == "mqar":
            pairs = self._pairs(rng)
            return _answer_segments(mqar_samples(self.high, [pairs], pairs, 1, sample_seed, reserved=self.low)[0])
        length = rng.randint(min(max(64, self.seq_len // 4), max(64, self.seq_len - 16)), max(64, self.seq_len - 16))
        depth = rng.random()
        if self.task == "passkey":
            sample = passkey_samples(self.tokenizer, [length], [depth], 1, sample_seed)[0]
        elif self.task == "niah-fwpkm":
            needles = FWPKM_NEEDLES if self.needles is None else rng.randint(*self.needles)
            if self.queries is not None:
                queries = min(needles, rng.randint(*self.queries))
                turns = fwpkm_niah_queries(self.tokenizer, docstring_text(), length, depth, needles, queries,
                                           sample_seed)
                return [segment for text, answer in turns for segment in ((text, False), (" " + answer, True))]
            sample = fwpkm_niah_samples(self.tokenizer, docstring_text(), [length], [depth], 1, sample_seed,
                                        needles=needles)[0]
        elif self.task == "repeat":
            sample = repeat_samples(self.tokenizer, docstring_text(), [length], 1, sample_seed)[0]
        else:
            sample = niah_samples(self.tokenizer, [length], [depth], 1, sample_seed, distractors=rng.randint(0, 3))[0]
        return [(sample.prompt, False), (" " + sample.answer, True)]

    def _pairs(self, rng: random.Random) -> int:
        """Key-value pairs of one mqar document: log-uniform in ``pairs`` when given, else uniform in
        ``[max_pairs / 4, max_pairs]`` (the documents that recipes without ``pairs`` have always had)."""
        if self.pairs is None:
            return rng.randint(max(1, self.max_pairs // 4), self.max_pairs)
        low, high = self.pairs[0], min(self.pairs[1], self.max_pairs)
        return min(high, int(math.exp(rng.uniform(math.log(low), math.log(high + 1)))))


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


class _HFReader(Reader):
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
        dataset = dataset.shuffle(seed=mix(seed, HF, epoch) % (1 << 32), buffer_size=HF_SHUFFLE_BUFFER)
        for position, example in enumerate(islice(dataset, skip, None), skip):
            yield self._text(example, position)


def open_reader(section: SourceSection, label: str, tokenizer, seq_len: int, seed: int,
                 vocab_size: int | None) -> Reader:
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
