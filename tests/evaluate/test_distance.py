"""The distance-resolved recall suite: prompts land in their buckets with their formats, identical for a seed and
new for another, scored per prompt; MQAR's batched, right-padded scoring equals scoring one prompt at a time."""

from __future__ import annotations

import re

import pytest
import torch
from checkpoints import EMBEDDED
from palimpsa.upgrade.evaluate.distance import (
    BUCKETS,
    TASKS,
    bucket_means,
    distance_suite,
    mqar_scores,
    run_suite,
    score_text,
)
from palimpsa.upgrade.evaluate.evaluation import mqar_accuracy
from palimpsa.upgrade.evaluate.tasks import FWPKM_NEEDLES, PASSKEY_QUESTION
from transformers import AutoTokenizer

SMALL = ((128, 256), (256, 512))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(EMBEDDED)


@pytest.fixture(scope="module")
def suite(tokenizer):
    return distance_suite(tokenizer, 264, per_bucket=12, seed=5)


def test_every_prompt_lies_in_its_bucket_measured_from_its_needle(suite, tokenizer):
    count = {}
    for item in suite:
        low, high = BUCKETS[item.bucket]
        assert low <= item.distance < high, (item.key, item.distance)
        count[(item.task, item.bucket)] = count.get((item.task, item.bucket), 0) + 1
    assert count == {(task, bucket): 12 for task in TASKS for bucket in range(len(BUCKETS))}
    # the recorded distance is what the tokenizer counts from the needle to the end (the byte-level tokenizer)
    for item in suite:
        if item.task == "passkey":
            prompt = item.sample.prompt
            start = prompt.index(f"The pass key is {item.sample.answer}.")
            assert item.distance == len(tokenizer(prompt[start:], add_special_tokens=False)["input_ids"])
            assert prompt.endswith(PASSKEY_QUESTION)
        if item.task == "niah_fwpkm":
            prompt = item.sample.prompt
            statements = re.findall(r"The value of key ([A-Z]{4}) is (\d{6})\. ", prompt)
            asked = re.search(r"What is the value of key ([A-Z]{4})\? The value of key \1 is$", prompt).group(1)
            assert len(statements) == FWPKM_NEEDLES and len({k for k, _ in statements}) == FWPKM_NEEDLES
            assert dict(statements)[asked] == item.sample.answer
            start = prompt.index(f"The value of key {asked} is")
            assert item.distance == len(prompt[start:].encode())
        if item.task == "repeat":
            assert item.sample.prompt.startswith(f"Remember this string: {item.sample.answer}\n")
        if item.task.startswith("mqar"):
            first_query = item.mqar.target_positions[0]
            pairs = int(item.task.rsplit("_", 1)[1])
            start = 2 * pairs if "interference" in item.task else 0  # from the newest pairs
            assert item.distance == first_query - start + 1
            assert len(item.mqar.targets) == pairs


def test_a_suite_is_a_function_of_its_seed(tokenizer, suite):
    again = distance_suite(tokenizer, 264, tasks=("passkey", "mqar_gap_8"), per_bucket=12, seed=5)
    mine = {item.key: item for item in suite}
    for item in again:
        same = mine[item.key]
        assert item.distance == same.distance
        assert (item.sample.prompt if item.sample else item.mqar.input_ids) == (
            same.sample.prompt if same.sample else same.mqar.input_ids)
    other = distance_suite(tokenizer, 264, tasks=("passkey",), per_bucket=12, seed=6)
    assert sum(o.sample.prompt != mine[o.key].sample.prompt for o in other) >= 55  # new prompts for a new seed


def test_refusals(tokenizer):
    with pytest.raises(ValueError, match="unknown distance task 'nope'"):
        distance_suite(tokenizer, 264, tasks=("nope",), per_bucket=1)
    with pytest.raises(ValueError, match="mqar_gap_200: 200 pairs need 200 keys"):
        distance_suite(tokenizer, 264, tasks=("mqar_gap_200",), per_bucket=1)
    with pytest.raises(ValueError, match="beyond the bucket 32-64"):
        distance_suite(tokenizer, 264, tasks=("mqar_gap_32",), buckets=((32, 64),), per_bucket=1)


def test_scores_per_prompt():
    assert score_text("passkey", " 12345. The", "12345") == {"score": 1.0}
    assert score_text("passkey", " 123456", "12345") == {"score": 0.0}
    assert score_text("niah_fwpkm", " 123465.", "123456") == {"score": 0.0, "part": pytest.approx(4 / 6)}
    assert score_text("niah_fwpkm", "no digits", "123456") == {"score": 0.0, "part": 0.0}
    assert score_text("repeat", " abcdef\nxyz", "abcdef") == {"score": 1.0, "part": 1.0}
    assert score_text("repeat", " abcxef", "abcdef") == {"score": 0.0, "part": pytest.approx(5 / 6)}
    records = [{"task": "t", "bucket": 0, "score": 1.0}, {"task": "t", "bucket": 0, "score": 0.0},
               {"task": "t", "bucket": 1, "score": 1.0}]
    assert bucket_means(records, SMALL + ((512, 1024),)) == {"t": [0.5, 1.0, None]}


def test_the_suite_runs_on_a_model_and_batched_mqar_equals_one_at_a_time(tokenizer, tiny_random):
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(tiny_random)
    model.eval()
    items = distance_suite(tokenizer, model.config.vocab_size, tasks=("passkey", "niah_fwpkm", "repeat",
                                                                       "mqar_gap_8", "mqar_interference_8"),
                           buckets=SMALL, per_bucket=2, seed=1)
    records = run_suite(model, tokenizer, items, batch_size=3)
    assert [r["key"] for r in records] == [i.key for i in items]
    for record in records:
        assert 0 <= record["score"] <= 1 and ("part" in record) == (record["task"] in ("niah_fwpkm", "repeat"))
        assert ("stale" in record) == (record["task"] == "mqar_interference_8")
    mqar = [i.mqar for i in items if i.mqar is not None]
    batched = mqar_scores(model, mqar, batch_size=3)
    single = [mqar_accuracy(model, [sample])[sample.pairs] for sample in mqar]
    assert batched == single
    # and a model that knows the answers scores 1 on every MQAR prompt (the targets are what the scorer reads)
    sample = mqar[0]

    class Oracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids):
            logits = torch.zeros(*ids.shape, model.config.vocab_size)
            logits[:, :-1].scatter_(-1, ids[:, 1:, None], 1.0)  # the next token, always
            return type("Output", (), {"logits": logits})

    assert mqar_scores(Oracle(), [sample], batch_size=1) == [1.0]
    overwritten = next(i.mqar for i in items if i.task == "mqar_interference_8")
    stale = []
    assert mqar_scores(Oracle(), [overwritten, sample], batch_size=2, stale=stale) == [1.0, 1.0]
    assert stale == [0.0, None]  # the newest value, never the overwritten one; no stale count without an overwrite
    assert len(overwritten.stale) == 8 and not set(overwritten.stale) & set(overwritten.targets)
