"""The recall tasks of the stronger base's pretraining: NIAH in the FwPKM form, repeat-after-gap, MQAR with a range
of pairs and with an overwrite; as generators and as synthetic training documents with the answer-only loss."""

from __future__ import annotations

import re

import pytest
from checkpoints import ROOT
from palimpsa.upgrade.evaluate.tasks import (
    docstring_text,
    fwpkm_niah_samples,
    mqar_gap_setup,
    mqar_interference_samples,
    repeat_samples,
)
from palimpsa.upgrade.train.data.mixture import DocumentSource
from palimpsa.upgrade.train.recipe import SourceSection
from transformers import AutoTokenizer

VOCAB = 272


@pytest.fixture(scope="module")
def tok(tiny_random):
    return AutoTokenizer.from_pretrained(str(tiny_random))


def test_docstring_haystack_is_prose_and_not_the_evaluation_text():
    from pydoc_data.topics import topics

    text = docstring_text()
    assert len(text) > 500_000 and "\n" not in text
    words = re.findall(r"[A-Za-z]+", text[:20000])
    assert sum(w.lower() in {"the", "a", "of", "to", "is"} for w in words) / len(words) > 0.1  # English prose
    held_out = " ".join(topics["assert"].split())[:200]
    assert held_out not in text  # eval-model's haystack (pydoc_data.topics) is not in the training haystack


def test_fwpkm_niah_needles_keys_values_depth_and_length(tok):
    haystack = docstring_text()
    for depth in (0.0, 0.5, 1.0):
        samples = fwpkm_niah_samples(tok, haystack, [768], [depth], 4, seed=3)
        for sample in samples:
            needles = re.findall(r"The value of key ([A-Z]{4}) is (\d{6})\. ", sample.prompt)
            assert len(needles) == 5 and len({k for k, _ in needles}) == 5
            queried = sample.prompt.rsplit("value of key ", 1)[1][:4]
            assert dict(needles)[queried] == sample.answer and sample.prompt.endswith(f"key {queried} is")
            # the depth counts haystack text: take the other needles and the question out before measuring
            text = sample.prompt[: sample.prompt.rindex("\nWhat is")]
            for key, value in needles:
                if key != queried:
                    text = text.replace(f"The value of key {key} is {value}. ", "")
            position = text.find(f"The value of key {queried} is") / len(text)
            assert abs(position - depth) < 0.08
            assert 700 <= len(tok(sample.prompt)["input_ids"]) <= 768
    again = fwpkm_niah_samples(tok, haystack, [768], [0.5], 4, seed=3)
    assert [s.prompt for s in again] == [s.prompt for s in fwpkm_niah_samples(tok, haystack, [768], [0.5], 4, 3)]
    assert len({s.answer for s in again}) == 4


def test_repeat_after_gap(tok):
    for sample in repeat_samples(tok, docstring_text(), [512], 5, seed=1):
        secret = re.match(r"Remember this string: ([a-z0-9]{24})\n", sample.prompt).group(1)
        assert sample.answer == secret and secret not in sample.prompt[40:]
        assert sample.prompt.endswith("Repeat the string you were asked to remember:")
        assert 470 <= len(tok(sample.prompt)["input_ids"]) <= 512


def test_mqar_interference_asks_for_the_newest_value(tok):
    filler, keys, values = mqar_gap_setup(tok, VOCAB)
    for sample in mqar_interference_samples(filler, keys, values, [200], 8, 3, seed=0):
        ids = sample.input_ids
        first, second = ids[:16], ids[16:32]
        assert first[0::2] == second[0::2]  # the same keys, written twice
        newest = dict(zip(second[0::2], second[1::2]))
        oldest = dict(zip(first[0::2], first[1::2]))
        assert set(newest.values()).isdisjoint(oldest.values())
        for position, target in zip(sample.target_positions, sample.targets):
            assert newest[ids[position]] == target == ids[position + 1]
        assert len(ids) == 200


@pytest.mark.parametrize("task, answer", [("niah-fwpkm", r" \d{6}"), ("repeat", r" [a-z0-9]{24}")])
def test_text_recall_documents_train_on_their_answers(tok, task, answer):
    section = SourceSection(type="synthetic", task=task, documents=4, loss="answer")
    documents = DocumentSource([section], tok, seq_len=384, seed=0, vocab_size=VOCAB)
    for _ in range(4):
        doc = documents.next_document()
        assert len(doc) <= 384
        targets = "".join(chr(t) for t, keep in zip(doc, doc.targets) if keep)
        assert re.fullmatch(answer, targets), targets
        assert tok.decode(doc[:-1]).endswith(targets)


def test_mqar_pairs_range(tok):
    section = SourceSection(type="synthetic", task="mqar", documents=64, pairs=(4, 16))
    documents = DocumentSource([section], tok, seq_len=512, seed=0, vocab_size=VOCAB)
    counts = [(len(documents.next_document()) - 1) // 4 for _ in range(64)]
    assert min(counts) >= 4 and max(counts) <= 16 and len(set(counts)) > 5
    assert sum(c <= 8 for c in counts) > sum(c > 8 for c in counts) / 2  # log-uniform: the small end is well fed
    with pytest.raises(ValueError, match="pairs"):
        SourceSection(type="synthetic", task="passkey", pairs=(4, 8))
    from palimpsa.upgrade.errors import PalimpsaError

    with pytest.raises(PalimpsaError, match="more than the .* pairs that fit"):
        DocumentSource([SourceSection(type="synthetic", task="mqar", pairs=(100, 200))], tok, seq_len=128,
                       vocab_size=VOCAB)


def test_fwpkm_needles_range(tok):
    def needle_counts(section):
        documents = DocumentSource([section], tok, seq_len=384, seed=0, vocab_size=VOCAB)
        return [len(re.findall(r"The value of key [A-Z]{4} is \d{6}\.", tok.decode(documents.next_document())))
                for _ in range(24)]

    counts = needle_counts(SourceSection(type="synthetic", task="niah-fwpkm", documents=24, needles=(2, 3)))
    assert set(counts) == {2, 3}
    assert set(needle_counts(SourceSection(type="synthetic", task="niah-fwpkm", documents=24))) == {5}  # default


def test_fwpkm_queries_ask_distinct_needles_and_train_on_every_answer(tok):
    """The training form with several questions: each asked key is a needle of the document, no key is asked twice,
    and exactly the answers' digits carry the loss."""
    section = SourceSection(type="synthetic", task="niah-fwpkm", documents=12, loss="answer", needles=(2, 5),
                            queries=(2, 4))
    documents = DocumentSource([section], tok, seq_len=512, seed=3, vocab_size=VOCAB)
    asked_counts = set()
    for _ in range(12):
        doc = documents.next_document()
        text = tok.decode(doc)
        assert len(doc) <= 512
        needles = dict(re.findall(r"The value of key ([A-Z]{4}) is (\d{6})\. ", text))
        asked = re.findall(r"\nWhat is the value of key ([A-Z]{4})\? The value of key \1 is (\d{6})", text)
        assert 2 <= len(asked) <= min(4, len(needles)) and len({k for k, _ in asked}) == len(asked)
        assert all(needles[key] == value for key, value in asked)  # every answer is its own key's value
        asked_counts.add(len(asked))
        targets = "".join(chr(t) for t, keep in zip(doc, doc.targets) if keep)
        assert targets == "".join(" " + value for _, value in asked)
    assert len(asked_counts) > 1


def test_the_evaluations_niah_prompts_are_pinned():
    """The NIAH-FwPKM prompts that every recorded bar and test evaluation used: a digest of those the generator
    gave before it learned several questions (a change in what it draws, or in what order, changes them)."""
    import hashlib

    from palimpsa.upgrade.evaluate.tasks import fwpkm_niah_samples as samples

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "upgrade" / "assets" / "tiny-mamba2"))
    haystack = " ".join(f"Sentence {i} tells of the river and the hill number {i * 7 % 97}." for i in range(600))
    made = [s for n in (1, 3, 5) for s in samples(tokenizer, haystack, [200, 400], [0.0, 0.5, 1.0], 2, 5, needles=n)]
    digest = hashlib.sha256("".join(s.prompt + "|" + s.answer + "\n" for s in made).encode()).hexdigest()
    assert digest == "8325fcb3d9cbc98a1be13df04b2ddc7a530d81b8bc3cb1245cbe7af08c333693"


def test_fwpkm_single_query_form_is_unchanged_by_the_queries_generator(tok):
    """With one query the queries generator gives the evaluation's prompt: same text, same answer."""
    from palimpsa.upgrade.evaluate.tasks import fwpkm_niah_queries

    haystack = docstring_text()
    [sample] = fwpkm_niah_samples(tok, haystack, [300], [0.4], 1, 11, needles=3)
    [(prompt, answer)] = fwpkm_niah_queries(tok, haystack, 300, 0.4, 3, 1, 11)
    assert (prompt, answer) == (sample.prompt, sample.answer)
    turns = fwpkm_niah_queries(tok, haystack, 300, 0.4, 3, 3, 11)
    assert turns[0][1] == sample.answer and all(text.startswith(".\nWhat is") for text, _ in turns[1:])
    with pytest.raises(ValueError, match="queries"):
        fwpkm_niah_queries(tok, haystack, 300, 0.4, 3, 4, 11)


@pytest.mark.parametrize("task, field, value", [("repeat", "needles", (2, 3)), ("niah-fwpkm", "needles", (3, 2)),
                                                ("repeat", "queries", (2, 3)), ("niah-fwpkm", "queries", (0, 3))])
def test_needles_and_queries_are_niah_fwpkm_ranges(task, field, value):
    with pytest.raises(ValueError, match=field):
        SourceSection(type="synthetic", task=task, **{field: value})


@pytest.mark.parametrize("fields, seq_len, message", [
    ({"needles": (2, 20)}, 512, r"needles \[2, 20\] is more than the 1[0-9] needles that fit in seq_len 512"),
    ({"queries": (1, 1)}, 192, "the default 5 needles is more than the 1 needles that fit in seq_len 192"),
    ({"queries": (5, 5)}, 384, r"5 needles with queries \[5, 5\] do not fit in seq_len 384"),
    ({"needles": (2, 3), "queries": (4, 4)}, 512, r"queries \[4, 4\] asks more questions than the at most 3"),
])
def test_niah_fwpkm_documents_that_cannot_fit_a_row_are_refused(tok, fields, seq_len, message):
    from palimpsa.upgrade.errors import PalimpsaError

    with pytest.raises(PalimpsaError, match=message):
        DocumentSource([SourceSection(type="synthetic", task="niah-fwpkm", **fields)], tok, seq_len=seq_len,
                       vocab_size=VOCAB)


def test_the_longest_niah_fwpkm_documents_that_pass_fit_their_row(tok):
    from palimpsa.upgrade.errors import PalimpsaError

    DocumentSource([SourceSection(type="synthetic", task="niah-fwpkm", queries=(1, 2))], tok, seq_len=384,
                   vocab_size=VOCAB)  # 5 needles and 2 questions fit in 384
    # at the shortest rows that the check lets through, the longest documents still fit a row whole: needles,
    # questions, the one haystack piece that a document always keeps, the end-of-text token
    most = SourceSection(type="synthetic", task="niah-fwpkm", documents=16, needles=(5, 5), queries=(5, 5))
    with pytest.raises(PalimpsaError, match="do not fit in seq_len 549"):
        DocumentSource([most], tok, seq_len=549, vocab_size=VOCAB)
    documents = DocumentSource([most], tok, seq_len=550, seed=0, vocab_size=VOCAB)
    assert max(len(documents.next_document()) for _ in range(16)) <= 550
