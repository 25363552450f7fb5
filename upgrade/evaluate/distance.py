"""Recall resolved by needle-to-question distance, one score per prompt (for paired statistics between models).

Context length mixes two things: how far back the answer lies and how much text there is. This suite controls the
first. Each prompt is built around a target distance, drawn log-uniformly inside its bucket, from the first token
of the needle to the last token of the question; the distance is then measured on the prompt as tokenised and
recorded. The formats are the training documents' (:mod:`.tasks`), with the answer's place fixed:

- ``passkey``: instruction, filler, the pass-key statement, filler, the question; up to a quarter of the distance
  again of filler before the needle;
- ``niah_fwpkm``: NIAH in the FwPKM form, five needles in natural text (``pydoc_data.topics``), the queried one at
  the distance, the four others anywhere in the prompt; scored exactly and per digit;
- ``repeat``: the 24-character string opens the prompt (as in training), the gap, the request; exactly and per
  character;
- ``mqar_gap_N``: N key-value pairs, a gap, every key queried; the distance runs from the first pair to the first
  query; the score is the share of queries answered (argmax);
- ``mqar_interference_N``: pairs A, then the same keys with new values (pairs B), a gap, every key queried for its
  newest value; the distance runs from the first pair of B; ``stale`` counts the answers that are A's values.

Every prompt is a pure function of the seed, the task, the bucket and its index, so a suite is the same for every
model, and validation and test suites differ only in their seeds (:data:`VALIDATION_SEED` and up for validation).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from .tasks import (
    FILLER,
    FWPKM_NEEDLE,
    FWPKM_NEEDLES,
    FWPKM_QUESTION,
    KEY_ALPHABET,
    PASSKEY_INSTRUCTION,
    PASSKEY_QUESTION,
    REPEAT_ALPHABET,
    MQARSample,
    Sample,
    _haystack_window,
    _queried,
    mqar_gap_setup,
)

BUCKETS = ((256, 512), (512, 1024), (1024, 2048), (2048, 4096), (4096, 8192))
TASKS = ("passkey", "niah_fwpkm", "repeat", "mqar_gap_8", "mqar_gap_32", "mqar_gap_96", "mqar_interference_32")
VALIDATION_SEED = 1_000_000  # validation seeds are this and above; test seeds below
REPEAT_CHARS = 24


@dataclass
class Item:
    """One prompt of the suite: generated text (``sample``) or token ids (``mqar``), with its measured distance."""

    task: str
    bucket: int
    distance: int
    sample: Sample | None = None
    mqar: MQARSample | None = None
    key: str = field(default="")  # task/bucket/index: the same prompt across models


def parse_buckets(text: str, lowest: int = 1) -> list[tuple[int, int]]:
    """Buckets from comma-separated rising edges in tokens (``256,512,1024``: two buckets), the first at least
    ``lowest``; a ValueError that says what to give otherwise."""
    try:
        edges = [int(x) for x in text.split(",")]
    except ValueError:
        edges = []
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])) or edges[0] < lowest:
        raise ValueError(f"{text!r}: give rising token counts from {lowest} up, at least two (256,512,1024 makes two "
                         "buckets)")
    return list(zip(edges[:-1], edges[1:]))


def _mqar_pairs(task: str) -> int:
    return int(task.rsplit("_", 1)[1])


def check_tasks(tasks: list[str] | tuple[str, ...]) -> None:
    for task in tasks:
        base = task.rsplit("_", 1)[0] if task.startswith("mqar") else task
        if base not in ("passkey", "niah_fwpkm", "repeat", "mqar_gap", "mqar_interference") or (
                task.startswith("mqar") and not task.rsplit("_", 1)[1].isdigit()):
            raise ValueError(f"unknown distance task {task!r}; the tasks are passkey, niah_fwpkm, repeat, "
                             "mqar_gap_N and mqar_interference_N (N pairs)")


def _target(rng: random.Random, low: int, high: int) -> int:
    """A distance drawn log-uniformly from ``[low, high)`` less 4% at the top (what the assembled prompt's
    tokenisation may add). Prompts fall short of their target by less than a piece of haystack, and one that falls
    below ``low`` gets one more piece."""
    high = high * 0.96
    return int(low * math.exp(rng.random() * math.log(high / low)))


class _Counter:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _take(pieces: list[str], counts: list[int], start: int, tokens: int) -> tuple[list[str], int]:
    """Pieces from ``start`` on (wrapping) while their tokens stay within ``tokens``; the next start."""
    taken, used, index = [], 0, start
    while tokens - used >= counts[index % len(pieces)]:
        taken.append(pieces[index % len(pieces)])
        used += counts[index % len(pieces)]
        index += 1
        if len(taken) > 4 * len(pieces) + tokens:  # pieces of no tokens: cannot happen with real text
            break
    return taken, index


def _gap(pieces: list[str], counts: list[int], start: int, tokens: int, long_enough) -> tuple[list[str], int]:
    """:func:`_take`, then one more piece at a time until ``long_enough(gap)`` (a prompt a piece short of its
    bucket); the next start."""
    gap, after = _take(pieces, counts, start, tokens)
    while not long_enough(gap):
        gap.append(pieces[after % len(pieces)])
        after += 1
    return gap, after


def _filler_sentences() -> list[str]:
    return [s.strip().rstrip(".") + ". " for s in FILLER.split(". ") if s.strip()]


def passkey_item(tokenizer, rng: random.Random, distance: int, minimum: int = 0) -> tuple[Sample, int]:
    count = _Counter(tokenizer)
    key = str(rng.randint(10000, 99999))
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    sentences = _filler_sentences()
    counts = [count(s) for s in sentences]
    start = rng.randrange(len(sentences))
    gap, after = _gap(sentences, counts, start, distance - count(needle) - count(PASSKEY_QUESTION),
                      lambda gap: count(needle + "".join(gap) + PASSKEY_QUESTION) >= minimum)
    lead, _ = _take(sentences, counts, after, rng.randint(0, distance // 4))
    prompt = PASSKEY_INSTRUCTION + "".join(lead) + needle + "".join(gap) + PASSKEY_QUESTION
    return Sample(prompt, key, count(prompt)), count(prompt[prompt.index(needle):])


def niah_item(tokenizer, haystack: str, rng: random.Random, distance: int, minimum: int = 0,
              needles: int = FWPKM_NEEDLES) -> tuple[Sample, int]:
    count = _Counter(tokenizer)
    keys: list[str] = []
    while len(keys) < needles:
        key = "".join(rng.choices(KEY_ALPHABET, k=4))
        if key not in keys:
            keys.append(key)
    values = [str(rng.randint(100_000, 999_999)) for _ in keys]
    statements = [FWPKM_NEEDLE.format(key=k, value=v) for k, v in zip(keys, values)]
    question = FWPKM_QUESTION.format(key=keys[0])
    lead_tokens = rng.randint(0, distance // 4)
    others = sum(count(s) for s in statements[1:])
    pieces = _haystack_window(haystack, rng, 8 * (distance + lead_tokens) + 400)
    counts = [count(p) for p in pieces]
    # the other needles go into the gap or the lead at random; the gap's text shrinks by what lands in it
    in_gap = [rng.random() < distance / (distance + lead_tokens) for _ in statements[1:]]
    gap_needles = sum(count(s) for s, g in zip(statements[1:], in_gap) if g)
    gap, after = _gap(pieces, counts, 0, distance - count(statements[0]) - count(question) - gap_needles,
                      lambda gap: count(statements[0] + "".join(gap) + question) + gap_needles >= minimum)
    lead, _ = _take(pieces, counts, after, max(0, lead_tokens - (others - gap_needles)))
    for statement, into_gap in zip(statements[1:], in_gap):
        target = gap if into_gap else lead
        target.insert(rng.randint(0, len(target)), statement)
    prompt = "".join(lead) + statements[0] + "".join(gap) + question
    return Sample(prompt, values[0], count(prompt)), count(prompt[prompt.index(statements[0]):])


def repeat_item(tokenizer, haystack: str, rng: random.Random, distance: int,
                minimum: int = 0) -> tuple[Sample, int]:
    count = _Counter(tokenizer)
    secret = "".join(rng.choices(REPEAT_ALPHABET, k=REPEAT_CHARS))
    head = f"Remember this string: {secret}\n"
    request = "\nRepeat the string you were asked to remember:"
    pieces = _haystack_window(haystack, rng, 8 * distance + 400)
    gap, _ = _gap(pieces, [count(p) for p in pieces], 0, distance - count(f"{secret}\n") - count(request),
                  lambda gap: count(f"{secret}\n" + "".join(gap) + request) >= minimum)
    prompt = head + "".join(gap) + request
    return Sample(prompt, secret, count(prompt)), count(prompt[len("Remember this string: "):])


def mqar_item(pools: tuple[list[int], list[int], list[int]], rng: random.Random, distance: int, pairs: int,
              interference: bool) -> tuple[MQARSample, int]:
    filler, key_pool, value_pool = pools
    keys = rng.sample(key_pool, pairs)
    if interference:
        chosen = rng.sample(value_pool, 2 * pairs)
        old, values = chosen[:pairs], chosen[pairs:]
        ids = [t for pair in zip(keys, old) for t in pair]
    else:
        values, ids = rng.sample(value_pool, pairs), []
    first = len(ids)  # the distance runs from here (the newest pairs) to the first query
    ids += [t for pair in zip(keys, values) for t in pair]
    gap = max(0, distance - 2 * pairs)
    offset = rng.randrange(len(filler))
    ids.extend(filler[(offset + i) % len(filler)] for i in range(gap))
    measured = len(ids) - first + 1  # through the first queried key
    asked = rng.sample(range(pairs), pairs)
    sample = _queried(ids, keys, values, asked)
    if interference:
        sample.stale = [old[i] for i in asked]
    return sample, measured


def distance_suite(tokenizer, vocab_size: int | None, tasks=TASKS, buckets=BUCKETS, per_bucket: int = 200,
                   seed: int = 0, haystack: str | None = None, progress: bool = False) -> list[Item]:
    """The suite's prompts: ``per_bucket`` for each task and bucket. NIAH and repeat use ``haystack`` (default
    ``pydoc_data.topics``, never in a training mixture)."""
    from .tasks import default_long_text

    check_tasks(tasks)
    haystack = " ".join((haystack or default_long_text()).split())
    pools = mqar_gap_setup(tokenizer, vocab_size) if any(t.startswith("mqar") for t in tasks) else None
    items = []
    cells = [(t, b) for t in tasks for b in range(len(buckets))]
    for task, bucket in tqdm(cells, desc="building prompts", disable=not progress, leave=False):
        low, high = buckets[bucket]
        if task.startswith("mqar"):
            pairs = _mqar_pairs(task)
            needed = (2 if task.startswith("mqar_interference") else 1) * pairs
            if pairs > len(pools[1]) or needed > len(pools[2]):
                raise ValueError(f"{task}: {pairs} pairs need {pairs} keys and {needed} values outside the "
                                 f"haystack's tokens; this tokenizer leaves {len(pools[1])} and {len(pools[2])}")
            if 2 * pairs >= high:
                raise ValueError(f"{task}: {pairs} pairs take {2 * pairs} tokens, beyond the bucket {low}-{high}")
        for index in range(per_bucket):
            key = f"{task}/{low}-{high}/{index}"
            rng = random.Random(f"{seed}/{key}")  # string seeds hash deterministically (not by PYTHONHASHSEED)
            distance = _target(rng, max(low, 2 * _mqar_pairs(task) + 1) if task.startswith("mqar") else low, high)
            if task == "passkey":
                sample, measured = passkey_item(tokenizer, rng, distance, low)
            elif task == "niah_fwpkm":
                sample, measured = niah_item(tokenizer, haystack, rng, distance, low)
            elif task == "repeat":
                sample, measured = repeat_item(tokenizer, haystack, rng, distance, low)
            else:
                mqar, measured = mqar_item(pools, rng, distance, _mqar_pairs(task),
                                           task.startswith("mqar_interference"))
                items.append(Item(task, bucket, measured, mqar=mqar, key=key))
                continue
            items.append(Item(task, bucket, measured, sample=sample, key=key))
    return items


def score_text(task: str, completion: str, answer: str) -> dict[str, float]:
    """``score``: exact (1 or 0); ``part``: the share of the answer's digits (NIAH) or characters (repeat) right in
    place, where the task has one."""
    if task == "repeat":
        said = completion.strip()
        return {"score": float(said.startswith(answer)),
                "part": sum(a == b for a, b in zip(said, answer)) / len(answer)}
    from .evaluation import first_digits

    digits = first_digits(completion)  # the answer, as passkey_correct reads it
    scores = {"score": float(digits == answer)}
    if task == "niah_fwpkm":
        scores["part"] = sum(a == b for a, b in zip(digits, answer)) / len(answer)
    return scores


@torch.no_grad()
def mqar_scores(model, samples: list[MQARSample], batch_size: int, stale: list | None = None) -> list[float]:
    """Per sample, the share of its queries whose value is the argmax: batches right-padded (a causal model's
    outputs before the padding do not depend on it), the longest first. With a ``stale`` list, an interference
    sample's share of queries answered with the overwritten value is put at its index (None for the others)."""
    device = next(model.parameters()).device
    order = sorted(range(len(samples)), key=lambda i: -len(samples[i].input_ids))
    scores = [0.0] * len(samples)
    if stale is not None:
        stale[:] = [None] * len(samples)
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        width = len(samples[chunk[0]].input_ids)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, i in enumerate(chunk):
            ids[row, : len(samples[i].input_ids)] = torch.tensor(samples[i].input_ids)
        logits = model(ids.to(device)).logits
        for row, i in enumerate(chunk):
            predicted = logits[row, samples[i].target_positions].argmax(-1).cpu().tolist()
            scores[i] = sum(p == t for p, t in zip(predicted, samples[i].targets)) / len(samples[i].targets)
            if stale is not None and samples[i].stale is not None:
                stale[i] = sum(p == t for p, t in zip(predicted, samples[i].stale)) / len(samples[i].stale)
    return scores


def run_suite(model, tokenizer, items: list[Item], batch_size: int = 16, progress: bool = False) -> list[dict]:
    """One record per item, in the suite's order: ``key``, ``task``, ``bucket``, ``distance``, ``score``; for NIAH
    and repeat ``part``, for MQAR interference ``stale`` (the share answered with the overwritten value)."""
    from .evaluation import greedy_answers

    records: list[dict | None] = [None] * len(items)
    text = [i for i, item in enumerate(items) if item.sample is not None]
    if text:
        answers = greedy_answers(model, tokenizer, [items[i].sample for i in text], batch_size, progress=progress)
        for i, completion in zip(text, answers):
            records[i] = score_text(items[i].task, completion, items[i].sample.answer)
    ids = [i for i, item in enumerate(items) if item.mqar is not None]
    if ids:
        stale: list = []
        for i, score, old in zip(ids, mqar_scores(model, [items[i].mqar for i in ids], batch_size, stale), stale):
            records[i] = {"score": score} if old is None else {"score": score, "stale": old}
    return [{"key": item.key, "task": item.task, "bucket": item.bucket, "distance": item.distance, **record}
            for item, record in zip(items, records)]


def bucket_means(records: list[dict], buckets=BUCKETS, field_name: str = "score") -> dict[str, list[float | None]]:
    """Per task, the mean ``field_name`` in each bucket (None where the suite had no prompt)."""
    sums: dict[str, list[list[float]]] = {}
    for record in records:
        if field_name in record:
            sums.setdefault(record["task"], [[] for _ in buckets])[record["bucket"]].append(record[field_name])
    return {task: [sum(v) / len(v) if v else None for v in cells] for task, cells in sums.items()}
