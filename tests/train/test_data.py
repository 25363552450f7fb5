"""Tests of the fine-tuning data pipeline (``palimpsa.upgrade.train.data``).

Oracles: the documents written here (tokenised independently with the byte-level tokenizer of the random tiny
test model, ``tiny_random``: ids 0-255 are the bytes, 256 ends a text), a fresh ``DocumentSource`` replaying the
same seeded document sequence, and, for "no leakage" and state passing, a tiny model run on each document (piece)
alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from palimpsa.upgrade import PalimpsaConfig, PalimpsaError, PalimpsaForCausalLM
from palimpsa.upgrade.model.cache import PalimpsaCache
from palimpsa.upgrade.train.data import Batch, DocumentSource, TokenStream, build_data, pack_documents
from palimpsa.upgrade.train.data import sources as data_sources
from palimpsa.upgrade.train.recipe import DataSection, SourceSection
from transformers import AutoTokenizer

VOCAB = 272  # the byte vocabulary (257) padded to a multiple of 16, as the tiny models have it


@pytest.fixture(scope="module")
def tok(tiny_random):
    return AutoTokenizer.from_pretrained(str(tiny_random))


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def source(sections, tok, seq_len=32, seed=0, holdout=0) -> DocumentSource:
    sections = [SourceSection(**s) if isinstance(s, dict) else s for s in sections]
    return DocumentSource(sections, tok, seq_len=seq_len, seed=seed, vocab_size=VOCAB, holdout=holdout)


def one_epoch(documents: DocumentSource) -> list[list[int]]:
    return [documents.next_document() for _ in range(len(documents))]


def texts_of(tok, docs: list[list[int]]) -> list[str]:
    assert all(d[-1] == tok.eos_token_id for d in docs)
    return [tok.decode(d[:-1]) for d in docs]


def varied_texts(count: int, seed: int = 0) -> list[str]:
    """Documents of very different lengths (1 to ~150 tokens), each distinguishable."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 30, (count,), generator=g).tolist()
    return [f"d{i}:" + "".join(chr(97 + (i + j) % 26) * (1 + j % 5) for j in range(n)) for i, n in enumerate(lengths)]


def tiny_model() -> PalimpsaForCausalLM:
    config = PalimpsaConfig(d_model=32, n_layer=2, vocab_size=VOCAB, d_state=8, headdim=8, upgraded_layers=[1],
                            beta_init=0.5)
    return PalimpsaForCausalLM(config).eval()


# ----------------------------------------------------------------------------------------------------------------
# sources


def test_text_file_and_directory(tmp_path, tok):
    root = tmp_path / "books"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    texts = {"a.txt": "First book.\n\nIt has two paragraphs.\n", "sub/b.md": "Second, in markdown.",
             "c.txt": "Third: ünïcödé ✓"}
    for name, text in texts.items():
        (root / name).write_text(text)
    (root / "empty.txt").write_text("")
    (root / "notes.csv").write_text("not,text")
    (root / ".hidden" / "x.txt").write_text("hidden")
    documents = source([{"type": "text", "path": str(root)}], tok)
    assert len(documents) == 3
    assert sorted(texts_of(tok, one_epoch(documents))) == sorted(texts.values())
    single = source([{"type": "text", "path": str(root / "a.txt")}], tok)
    assert texts_of(tok, one_epoch(single)) == [texts["a.txt"]]
    assert DataSection(path=str(root)).resolved_sources()[0].type == "text"


def test_big_text_file_is_cut_at_blank_lines(tmp_path, tok, monkeypatch):
    paragraphs = [f"Paragraph {i}. " + "word " * (i % 7 + 3) for i in range(40)]
    text = "\n\n".join(paragraphs) + "\n"
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    monkeypatch.setattr(data_sources, "TEXT_DOCUMENT_MAX_BYTES", 120)
    documents = source([{"type": "text", "path": str(path)}], tok)
    reader = documents.readers[0]
    pieces = [reader.read(i) for i in range(len(reader))]
    assert len(pieces) > 5
    assert "".join(pieces) == text  # nothing lost or repeated
    assert all(p.endswith("\n\n") and not p.startswith("\n") for p in pieces[:-1])
    assert all(len(p.encode()) <= 2 * 120 for p in pieces)


def test_jsonl_file_and_directory(tmp_path, tok):
    folder = tmp_path / "j"
    folder.mkdir()
    write_jsonl(folder / "one.jsonl", ["alpha", "beta"], field="body")
    (folder / "two.jsonl").write_text(json.dumps({"body": "gamma"}) + "\n\n" + json.dumps({"body": ""}) + "\n"
                                      + json.dumps({"body": "delta {with} \"quotes\"\nand a newline"}) + "\n")
    documents = source([{"type": "jsonl", "path": str(folder), "text_field": "body"}], tok)
    assert len(documents) == 4  # the blank line and the empty text are skipped
    assert sorted(texts_of(tok, one_epoch(documents))) == sorted(
        ["alpha", "beta", "gamma", "delta {with} \"quotes\"\nand a newline"])
    assert DataSection(path=str(folder)).resolved_sources()[0].type == "jsonl"


def test_parquet(tmp_path, tok):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    texts = [f"row {i} " + "x" * i for i in range(23)]
    pq.write_table(pa.table({"content": texts, "n": list(range(23))}), tmp_path / "a.parquet", row_group_size=5)
    pq.write_table(pa.table({"content": ["other file", None, ""], "n": [0, 1, 2]}), tmp_path / "b.parquet")
    documents = source([{"type": "parquet", "path": str(tmp_path), "text_field": "content"}], tok)
    assert len(documents.readers[0]) == 26
    got = [documents.next_document() for _ in range(24)]  # 24 non-empty rows: one epoch, the empty ones skipped
    assert sorted(texts_of(tok, got)) == sorted(texts + ["other file"])
    with pytest.raises(PalimpsaError, match="no column 'text'.*content"):
        source([{"type": "parquet", "path": str(tmp_path / "a.parquet")}], tok)


def test_hf_dataset_streamed_from_a_local_directory(tmp_path, tok):
    pytest.importorskip("datasets")
    texts = [f"streamed document {i}" for i in range(12)]
    write_jsonl(tmp_path / "train.jsonl", texts)
    section = {"type": "hf", "name": str(tmp_path), "split": "train"}
    documents = source([section], tok)
    first = texts_of(tok, [documents.next_document() for _ in range(12)])
    assert sorted(first) == sorted(texts)
    second = texts_of(tok, [documents.next_document() for _ in range(12)])  # a new epoch, shuffled anew
    assert sorted(second) == sorted(texts) and second != first
    held = source([section], tok, holdout=3)
    assert texts_of(tok, held.heldout) == texts[:3]
    assert sorted(texts_of(tok, [held.next_document() for _ in range(9)])) == sorted(texts[3:])


def test_pydoc(tok):
    from pydoc_data.topics import topics

    documents = source([{"type": "pydoc"}], tok)
    assert len(documents) == sum(1 for t in topics.values() if t.strip()) > 50
    texts = texts_of(tok, [documents.next_document() for _ in range(20)])
    assert len(set(texts)) == 20 and all(t in topics.values() for t in texts)


def test_synthetic_passkey_and_niah(tok):
    passkey = source([{"type": "synthetic", "task": "passkey", "documents": 6}], tok, seq_len=256)
    docs = texts_of(tok, one_epoch(passkey))
    keys = set()
    for text in docs:
        key = text.rsplit(" ", 1)[1]
        assert text.endswith("What is the pass key? The pass key is " + key)
        assert f"The pass key is {key}. Remember it." in text
        keys.add(key)
    assert len(keys) == 6
    again = source([{"type": "synthetic", "task": "passkey", "documents": 6}], tok, seq_len=256)
    assert texts_of(tok, one_epoch(again)) == docs  # seeded
    niah = source([{"type": "synthetic", "task": "niah", "documents": 6}], tok, seq_len=256)
    for text in texts_of(tok, one_epoch(niah)):
        value = text.rsplit(" ", 1)[1]
        assert len(value) == 7 and value.isdigit()
        assert f"is: {value}." in text and "special magic number for" in text


def test_synthetic_mqar(tok):
    seq_len = 64
    documents = source([{"type": "synthetic", "task": "mqar", "documents": 8}], tok, seq_len=seq_len)
    for doc in one_epoch(documents):
        assert doc[-1] == tok.eos_token_id and len(doc) <= seq_len
        ids = doc[:-1]
        assert all(0 <= t < 256 for t in ids)  # inside the vocabulary, the special token (256) kept out
        pairs = dict(zip(ids[0::2], ids[1::2]))
        keys, values = ids[0::2], ids[1::2]
        assert all(k < 128 <= v for k, v in zip(keys, values))
        n = len(ids) // 4
        assert all(pairs[k] == v for k, v in zip(keys[n:], values[n:]))  # queried keys followed by their value


@pytest.mark.parametrize("state_passing", [False, True])
def test_answer_only_documents_carry_loss_on_their_answers_alone(tok, state_passing):
    """``loss: answer``: passkey and niah documents train on the answer's characters, mqar on the queried values;
    the same documents as with ``loss: all``, packed or state-passed, and restored exactly on resume."""
    sections = [{"type": "synthetic", "task": "passkey", "documents": 4, "loss": "answer"},
                {"type": "synthetic", "task": "mqar", "documents": 4, "loss": "answer"}]
    data = DataSection(sources=sections, seq_len=512, batch_size=2, state_passing=state_passing, eval_documents=0)
    stream = build_data(data, tok, vocab_size=VOCAB)[0]
    everything = DataSection(sources=[{**s, "loss": "all"} for s in sections], seq_len=512, batch_size=2,
                             state_passing=state_passing, eval_documents=0)
    plain = build_data(everything, tok, vocab_size=VOCAB)[0]
    state = None
    for index in range(6):
        if index == 3:
            state = json.loads(json.dumps(stream.state_dict()))
        batch, reference = next(stream), next(plain)
        assert torch.equal(batch.input_ids, reference.input_ids)  # the same tokens, fewer targets
        assert batch.input_tokens == reference.input_tokens and 0 < batch.tokens < reference.tokens / 3
        targets = batch.labels != -100
        assert torch.equal(batch.labels[targets], reference.labels[targets])
        for row_ids, row_targets in zip(batch.input_ids, targets):
            text = tok.decode(row_ids[row_targets])
            # passkey answers are 5 digits after a space; mqar values come from the upper half of the bytes
            assert all(c.isdigit() or c == " " or ord(c) >= 128 for c in text), text
        if index == 5:
            last = batch
    resumed = build_data(data, tok, vocab_size=VOCAB)[0]
    resumed.load_state_dict(state)
    for _ in range(3):
        again = next(resumed)
    assert torch.equal(again.labels, last.labels)
    with pytest.raises(ValueError, match="loss: answer needs a synthetic source"):
        SourceSection(type="pydoc", loss="answer")


def test_answer_only_passkey_targets_are_exactly_the_answer(tok):
    documents = source([{"type": "synthetic", "task": "passkey", "documents": 3, "loss": "answer"}], tok,
                       seq_len=256)
    for doc in one_epoch(documents):
        answer = "".join(chr(t) for t, keep in zip(doc, doc.targets) if keep)
        assert answer.startswith(" ") and answer[1:].isdigit() and len(answer) == 6
        assert tok.decode(doc[:-1]).endswith("The pass key is" + answer)


# ----------------------------------------------------------------------------------------------------------------
# packing


def docs_data(tmp_path, count=30, seed=0) -> Path:
    return write_jsonl(tmp_path / f"docs{seed}.jsonl", varied_texts(count, seed))


def test_packing_layout_and_no_token_lost(tmp_path, tok):
    seq_len, rows = 24, 3
    path = docs_data(tmp_path, 12)
    stream = TokenStream(source([{"type": "jsonl", "path": str(path)}], tok), seq_len, rows)
    batches = [next(stream) for _ in range(20)]
    replay = source([{"type": "jsonl", "path": str(path)}], tok)
    expected_tokens, doc_starts = [], set()
    total = 20 * rows * seq_len
    while len(expected_tokens) < total:  # the same seeded document sequence, laid end to end
        doc_starts.add(len(expected_tokens))
        expected_tokens += replay.next_document()
    flat = []
    for number, batch in enumerate(batches):
        assert batch.input_ids.shape == batch.labels.shape == (1, rows * seq_len)
        assert batch.input_ids.dtype == batch.labels.dtype == batch.cu_seqlens.dtype == torch.long
        assert batch.continues is None
        base = number * rows * seq_len
        starts = sorted({s - base for s in doc_starts if base <= s < base + rows * seq_len}
                        | set(range(0, rows * seq_len, seq_len)))
        assert batch.cu_seqlens.tolist() == starts + [rows * seq_len]
        ids, labels = batch.input_ids[0], batch.labels[0]
        masked = (labels == -100).nonzero().flatten().tolist()
        assert masked == starts
        keep = labels != -100
        assert torch.equal(labels[keep], ids[keep])
        assert batch.tokens == int(keep.sum())
        flat += ids.tolist()
    assert flat == expected_tokens[:total]  # in order, nothing lost or duplicated
    assert len(doc_starts) > 24  # documents of more than two epochs went through


def test_packing_resets_the_state_at_document_boundaries(tmp_path, tok):
    torch.manual_seed(0)
    model = tiny_model()
    stream = TokenStream(source([{"type": "jsonl", "path": str(docs_data(tmp_path))}], tok), 40, 2)
    checked = 0
    with torch.no_grad():
        for _ in range(3):
            batch = next(stream)
            packed = model(input_ids=batch.input_ids, cu_seqlens=batch.cu_seqlens).logits[0]
            unpacked = model(input_ids=batch.input_ids).logits[0]
            bounds = batch.cu_seqlens.tolist()
            leaks = 0.0
            for a, b in zip(bounds, bounds[1:]):
                alone = model(input_ids=batch.input_ids[:, a:b]).logits[0]
                assert (packed[a:b] - alone).abs().max().item() <= 1e-5
                leaks = max(leaks, (unpacked[a:b] - alone).abs().max().item())
                checked += 1
            assert leaks > 1e-3  # without cu_seqlens the state does cross the boundaries: the check has teeth
    assert checked > 6


# ----------------------------------------------------------------------------------------------------------------
# state passing


def test_state_passing_rows_and_continues_flags(tmp_path, tok):
    seq_len, rows = 16, 3
    path = docs_data(tmp_path)
    stream = TokenStream(source([{"type": "jsonl", "path": str(path)}], tok), seq_len, rows, state_passing=True)
    replay = source([{"type": "jsonl", "path": str(path)}], tok)
    current = [None] * rows  # the oracle: [document, offset] per row
    pad = tok.eos_token_id
    spans = 0
    for _ in range(25):
        batch = next(stream)
        assert batch.input_ids.shape == batch.labels.shape == (rows, seq_len) and batch.cu_seqlens is None
        assert batch.continues.dtype == torch.bool and batch.continues.shape == (rows,)
        for r in range(rows):
            continues = current[r] is not None and current[r][1] < len(current[r][0])
            assert bool(batch.continues[r]) == continues
            if not continues:
                current[r] = [replay.next_document(), 0]
            doc, offset = current[r]
            piece = doc[offset : offset + seq_len]
            n = len(piece)
            assert batch.input_ids[r, :n].tolist() == piece
            assert batch.input_ids[r, n:].tolist() == [pad] * (seq_len - n)
            assert batch.labels[r].tolist() == [-100] + piece[1:] + [-100] * (seq_len - n)
            current[r][1] += n
            spans += continues
        assert batch.tokens == int((batch.labels != -100).sum())
    assert spans > 10  # long documents did span batches


def test_state_passing_with_a_carried_cache_matches_whole_documents(tmp_path, tok):
    torch.manual_seed(0)
    model = tiny_model()
    prior = model.config.importance_prior
    seq_len, rows = 12, 2
    stream = TokenStream(source([{"type": "jsonl", "path": str(docs_data(tmp_path))}], tok), seq_len, rows,
                         state_passing=True)
    cache = PalimpsaCache(model.config.n_layer)
    pieces: list[list] = [[] for _ in range(rows)]  # per row: [(ids, logits)] of the current document
    finished = []
    with torch.no_grad():
        for _ in range(20):
            batch = next(stream)
            cache.reset_rows(batch.continues, prior)
            logits = model(input_ids=batch.input_ids, cache_params=cache).logits
            for r in range(rows):
                if not batch.continues[r]:
                    if pieces[r]:
                        finished.append(pieces[r])
                    pieces[r] = []
                pieces[r].append((batch.input_ids[r], logits[r]))
    compared = 0
    with torch.no_grad():
        for segments in finished:
            ids = torch.cat([s[0] for s in segments])
            got = torch.cat([s[1] for s in segments])
            end = (ids == tok.eos_token_id).nonzero()[0].item() + 1  # the document, without the padding after it
            whole = model(input_ids=ids[None, :end]).logits[0]
            assert (got[:end] - whole).abs().max().item() <= 1e-4
            compared += len(segments) > 1
    assert compared >= 3  # documents that spanned several batches were checked


# ----------------------------------------------------------------------------------------------------------------
# determinism, resume, mixture


def mixture(tmp_path, tok, seed=0, weights=(2.0, 1.0)) -> list[dict]:
    folder = tmp_path / "texts"
    folder.mkdir(exist_ok=True)
    for i, text in enumerate(varied_texts(5, seed=7)):
        (folder / f"{i}.txt").write_text(text * 3)
    return [{"type": "jsonl", "path": str(docs_data(tmp_path, 12)), "weight": weights[0]},
            {"type": "text", "path": str(folder), "weight": weights[1]}]


def same(a: Batch, b: Batch) -> bool:
    def eq(x, y):
        return (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
    return all(eq(getattr(a, f), getattr(b, f)) for f in ("input_ids", "labels", "cu_seqlens", "continues")) \
        and a.tokens == b.tokens


@pytest.mark.parametrize("state_passing", [False, True])
def test_determinism_and_exact_resume(tmp_path, tok, state_passing):
    sections = mixture(tmp_path, tok)

    def make(seed=0):
        data = DataSection(sources=sections, seq_len=16, batch_size=3, state_passing=state_passing, eval_documents=2,
                           seed=seed)
        return build_data(data, tok, vocab_size=VOCAB)[0]

    full = make()
    reference = [next(full) for _ in range(40)]
    twin = make()
    assert all(same(a, next(twin)) for a in reference)
    other = make(seed=1)
    assert not all(same(a, next(other)) for a in reference[:5])
    for k in (1, 7, 23):  # mid-document, and after the sources have rolled over into new epochs
        first = make()
        for _ in range(k):
            next(first)
        state = json.loads(json.dumps(first.state_dict()))
        resumed = make()
        resumed.load_state_dict(state)
        for i in range(k, 40):
            assert same(next(resumed), reference[i]), f"batch {i} differs after resuming at {k}"
    with pytest.raises(PalimpsaError, match="seq_len"):
        data = DataSection(sources=sections, seq_len=32, batch_size=3, state_passing=state_passing)
        build_data(data, tok, vocab_size=VOCAB)[0].load_state_dict(state)


def test_mixture_weights_and_epoch_reshuffle(tmp_path, tok):
    a = write_jsonl(tmp_path / "a.jsonl", [f"A{i}" for i in range(7)])
    b = write_jsonl(tmp_path / "b.jsonl", [f"B{i}" for i in range(5)])
    documents = source([{"type": "jsonl", "path": str(a), "weight": 3}, {"type": "jsonl", "path": str(b)}], tok)
    texts = texts_of(tok, [documents.next_document() for _ in range(4000)])
    share = sum(t.startswith("A") for t in texts) / len(texts)
    assert abs(share - 0.75) < 0.03
    from_a = [t for t in texts if t.startswith("A")]
    epochs = [from_a[i : i + 7] for i in range(0, 21, 7)]
    assert all(sorted(e) == [f"A{i}" for i in range(7)] for e in epochs)  # each epoch: every document once
    assert len({tuple(e) for e in epochs}) == 3  # and a new order each time


def test_eval_batches_hold_out_documents(tmp_path, tok):
    texts = varied_texts(10)
    path = write_jsonl(tmp_path / "d.jsonl", texts)
    stream, eval_batches = build_data(DataSection(path=str(path), seq_len=16, batch_size=2, eval_documents=3), tok,
                                      vocab_size=VOCAB)
    held = texts_of(tok, stream.documents.heldout)
    assert len(held) == 3 and set(held) <= set(texts)
    train = set(texts_of(tok, [stream.documents.next_document() for _ in range(20)]))
    assert train == set(texts) - set(held)
    flat = torch.cat([b.input_ids[0] for b in eval_batches]).tolist()
    expected = [t for doc in stream.documents.heldout for t in doc]
    assert flat[: len(expected)] == expected and set(flat[len(expected):]) <= {tok.eos_token_id}
    for batch in eval_batches:
        assert batch.continues is None and batch.input_ids.shape[1] % 16 == 0
        assert batch.input_ids.shape[1] <= 32 and batch.cu_seqlens[-1] == batch.input_ids.shape[1]
        assert batch.tokens == int((batch.labels != -100).sum())
    assert build_data(DataSection(path=str(path), eval_documents=0), tok)[1] == []
    padded = pack_documents([[1, 2, 3]], 8, 4, pad_id=0)
    assert len(padded) == 1 and padded[0].cu_seqlens.tolist() == [0, 3, 8]
    assert padded[0].labels.tolist() == [[-100, 2, 3] + [-100] * 5]


# ----------------------------------------------------------------------------------------------------------------
# errors


def build(tok, **data):
    return build_data(DataSection(**data), tok, vocab_size=VOCAB)


def test_errors_name_the_problem(tmp_path, tok, tiny_random):
    with pytest.raises(PalimpsaError, match="does not exist"):
        build(tok, path=str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PalimpsaError, match="no .txt"):
        build(tok, path=str(tmp_path / "empty"))
    (tmp_path / "blank.txt").write_text("")
    with pytest.raises(PalimpsaError, match="no documents"):
        build(tok, path=str(tmp_path / "blank.txt"))
    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(PalimpsaError, match="no documents"):
        build(tok, path=str(tmp_path / "blank.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "also fine"}\n{"text": oops}\n')
    with pytest.raises(PalimpsaError, match=r"bad\.jsonl, line 3: not valid JSON"):
        build(tok, path=str(bad))
    wrong = write_jsonl(tmp_path / "wrong.jsonl", ["a", "b"], field="body")
    with pytest.raises(PalimpsaError, match=r"wrong\.jsonl, line 1: no field 'text' \(it has: body, id\)"):
        build(tok, path=str(wrong))
    few = write_jsonl(tmp_path / "few.jsonl", ["a", "b", "c"])
    with pytest.raises(PalimpsaError, match=r"eval_documents \(3\) must be below the 3 documents"):
        build(tok, path=str(few), eval_documents=3)
    build(tok, path=str(few), eval_documents=2)
    with pytest.raises(PalimpsaError, match="eval_documents"):
        build(tok, sources=[{"type": "synthetic", "task": "mqar", "documents": 4}], eval_documents=4)
    big = AutoTokenizer.from_pretrained(str(tiny_random))
    with pytest.raises(PalimpsaError, match="vocabulary"):
        build_data(DataSection(path=str(few), eval_documents=0), big, vocab_size=100)


def test_missing_optional_packages_give_install_hints(tmp_path, tok, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setitem(sys.modules, "datasets", None)
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(PalimpsaError, match="pip install pyarrow"):
        build(tok, path=str(tmp_path / "x.parquet"))
    with pytest.raises(PalimpsaError, match="pip install datasets"):
        build(tok, sources=[{"type": "hf", "name": "some/dataset"}])


def test_hf_dataset_that_cannot_be_opened(tmp_path, tok):
    pytest.importorskip("datasets")
    with pytest.raises(PalimpsaError, match="cannot open Hugging Face dataset"):
        build(tok, sources=[{"type": "hf", "name": str(tmp_path / "nowhere")}], eval_documents=0)
