"""Documents made by worker processes (``data.workers``) and per-source loss weights (``loss_weight``)."""

from __future__ import annotations

import json

import pytest
import torch
from palimpsa.upgrade import PalimpsaError
from palimpsa.upgrade.train.data import build_data
from palimpsa.upgrade.train.recipe import DataSection
from palimpsa.upgrade.train.trainer import weighted_loss
from test_data import VOCAB, mixture, same, tiny_model, write_jsonl
from transformers import AutoTokenizer


@pytest.fixture(scope="module")
def tok(tiny_random):
    return AutoTokenizer.from_pretrained(str(tiny_random))


def sections_with_synthetic(tmp_path, tok) -> list[dict]:
    return [*mixture(tmp_path, tok),
            {"type": "synthetic", "task": "passkey", "documents": 9, "weight": 1.0, "loss": "answer",
             "loss_weight": 4.0},
            {"type": "synthetic", "task": "mqar", "documents": 7, "weight": 1.0, "loss": "answer"},
            {"type": "synthetic", "task": "repeat", "documents": 5, "weight": 2.0, "answer_weight": 3.0}]


def same_weighted(a, b) -> bool:
    return same(a, b) and ((a.weights is None and b.weights is None) or torch.equal(a.weights, b.weights))


@pytest.mark.parametrize("state_passing", [False, True])
def test_workers_make_exactly_the_batches_of_one_thread_and_resume_exactly(tmp_path, tok, state_passing):
    sections = sections_with_synthetic(tmp_path, tok)

    def make(workers):
        data = DataSection(sources=sections, seq_len=48, batch_size=3, state_passing=state_passing,
                           eval_documents=2, workers=workers)
        return build_data(data, tok, vocab_size=VOCAB)[0]

    single = make(0)
    reference = [next(single) for _ in range(30)]  # several epochs of the small sources
    parallel = make(2)
    try:
        assert all(same_weighted(a, next(parallel)) for a in reference)
        assert parallel.state_dict() == single.state_dict()
    finally:
        parallel.documents.close()
    for k in (3, 17):
        first = make(0)
        for _ in range(k):
            next(first)
        resumed = make(2)
        try:
            resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
            for i in range(k, 30):
                assert same_weighted(next(resumed), reference[i]), f"batch {i} differs after resuming at {k}"
        finally:
            resumed.documents.close()


def test_closing_waits_for_the_chunks_given_out(tmp_path, tok):
    """``close()`` right after a resume (whose chunks in flight are dropped, not awaited) still lets every chunk
    the workers were given finish before ending them: a worker killed while writing its result would leave
    ``Pool.terminate`` waiting on a partial message forever."""
    data = DataSection(sources=sections_with_synthetic(tmp_path, tok), seq_len=48, batch_size=3, eval_documents=2,
                       workers=2)
    stream = build_data(data, tok, vocab_size=VOCAB)[0]
    state = stream.state_dict()
    next(stream)
    stream.load_state_dict(json.loads(json.dumps(state)))  # drops the chunks made ahead
    next(stream)
    documents = stream.documents
    assert documents._submitted
    documents.close()
    assert all(r.ready() for r in documents._submitted)


def test_workers_refuse_an_hf_stream(tmp_path, tok):
    pytest.importorskip("datasets")
    write_jsonl(tmp_path / "train.jsonl", [f"streamed document {i}" for i in range(6)])
    data = DataSection(sources=[{"type": "hf", "name": str(tmp_path), "split": "train"}], seq_len=16,
                       batch_size=2, eval_documents=0, workers=2)
    with pytest.raises(PalimpsaError, match="data.workers needs finite sources"):
        build_data(data, tok, vocab_size=VOCAB)


@pytest.mark.parametrize("state_passing", [False, True])
def test_loss_weight_marks_its_sources_targets(tmp_path, tok, state_passing):
    sections = sections_with_synthetic(tmp_path, tok)
    data = DataSection(sources=sections, seq_len=48, batch_size=3, state_passing=state_passing, eval_documents=2)
    stream = build_data(data, tok, vocab_size=VOCAB)[0]
    seen = set()
    for _ in range(30):
        batch = next(stream)
        if batch.weights is None:
            continue
        targets = batch.labels != -100
        assert batch.weights.shape == batch.labels.shape
        assert torch.all(batch.weights[~targets] == 0)
        seen.update(batch.weights[targets].unique().tolist())
    assert seen == {1.0, 3.0, 4.0}  # passkey answers 4, repeat's answers 3 and its other tokens 1, the rest 1
    unweighted = [{k: v for k, v in s.items() if k not in ("loss_weight", "answer_weight")} for s in sections]
    plain = build_data(DataSection(sources=unweighted, seq_len=48, batch_size=3, state_passing=state_passing,
                                   eval_documents=2), tok, vocab_size=VOCAB)[0]
    assert all(next(plain).weights is None for _ in range(30))


def test_weighted_loss_is_the_models_loss_under_equal_weights_and_weighs_targets():
    torch.manual_seed(0)
    model = tiny_model()
    ids = torch.randint(0, VOCAB, (2, 20))
    labels = ids.clone()
    labels[:, :3] = -100
    labels[1, 10:] = -100
    logits = model(input_ids=ids).logits
    reference = model(input_ids=ids, labels=labels).loss
    assert torch.allclose(weighted_loss(logits, labels, torch.full(ids.shape, 3.0)), reference, atol=1e-6)
    weights = torch.ones(ids.shape)
    weights[0, 15] = 5.0  # one target counted five times
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                                               reduction="none", ignore_index=-100).reshape(2, 19)
    valid = labels[:, 1:] != -100
    expected = (losses[valid].sum() + 4 * losses[0, 14]) / (valid.sum() + 4)
    assert torch.allclose(weighted_loss(logits, labels, weights), expected, atol=1e-6)


def test_answer_weight_weighs_exactly_the_answer_of_a_full_loss_document(tmp_path, tok):
    from palimpsa.upgrade.train.data import DocumentSource
    from palimpsa.upgrade.train.recipe import SourceSection

    def documents(**options):
        section = SourceSection(type="synthetic", task="passkey", documents=3, **options)
        return DocumentSource([section], tok, seq_len=128, vocab_size=VOCAB)

    full = documents(answer_weight=6.0).next_document()
    answer_only = documents(loss="answer").next_document()
    assert list(full) == list(answer_only) and full.targets is None
    assert full.weight == [6.0 if a else 1.0 for a in answer_only.targets]
    assert tok.decode([t for t, w in zip(full, full.weight) if w == 6.0]).strip().isdigit()
    assert documents().next_document().weight == 1.0
