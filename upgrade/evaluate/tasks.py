"""Seeded generators of long-context tasks (no download): passkey, needle-in-a-haystack, MQAR, and long text.

Every generator is a pure function of its arguments and a seed, so every model in a comparison sees identical
inputs. Formats follow the published protocols (see docs/evaluation.md):

- passkey (Landmark / LongLoRA): instruction, repeated filler, "The pass key is {K}. Remember it. {K} is the pass
  key." at a chosen depth, then "What is the pass key? The pass key is".
- niah (RULER niah_single_1 / niah_multikey_1): "One of the special magic numbers for {key} is: {value}." in a
  repeated-sentence haystack, 7-digit values; the multi-key form adds needles for distractor keys.
- mqar (Zoology): key and value token ids from the lower and upper half of the vocabulary, ``k1 v1 k2 v2 ...``
  then queried keys, each followed by its value; scored on the values after queried keys.
- mqar-gap: the same pairs and queries with a long gap of haystack text between them, so the recall distance
  grows with the length; keys and values are drawn from token ids that the haystack never uses.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASSKEY_INSTRUCTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
                       "it. I will quiz you about the important information there.\n")
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"
NIAH_KEYS = ("amber-falcon", "quiet-harbor", "silver-meadow", "rapid-orchid", "hollow-comet", "velvet-canyon",
             "brisk-lantern", "golden-thistle", "misty-anchor", "crimson-willow", "lunar-pebble", "wild-saffron",
             "frozen-beacon", "gentle-cobalt", "hidden-marble", "solar-juniper", "noble-quartz", "swift-heron",
             "ancient-fern", "bright-cinder")


@dataclass
class Sample:
    """One prompt and the exact answer expected after it."""

    prompt: str
    answer: str
    length: int  # target length in tokens
    depth: float | None = None


def _fill_to_length(tokenizer, prefix: str, needles: list[tuple[str, float]], suffix: str, length: int,
                    haystack: str | list[str] = FILLER) -> str:
    """``prefix`` + haystack sentences with each ``(needle, depth)`` inserted between sentences at its depth
    (0 = start, 1 = end) + ``suffix``, about ``length`` tokens in all: the haystack fills what the fixed parts
    leave and errs below the target; when the fixed parts alone exceed it, one haystack sentence remains.
    ``haystack`` is text cut into sentences at ". ", or the pieces to use as they are."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if isinstance(haystack, list):
        sentences = haystack
    else:
        sentences = [s.strip().rstrip(".") + ". " for s in haystack.replace("\n", " ").split(". ") if s.strip()]
    fixed_text = prefix + "".join(n for n, _ in needles) + suffix
    budget = max(0, length - count(fixed_text))
    per_sentence = max(1.0, count("".join(sentences)) / len(sentences))
    body = [sentences[i % len(sentences)] for i in range(max(1, int(budget / per_sentence)))]

    def assemble(parts: list[str]) -> str:
        placed = list(parts)
        for needle, depth in sorted(needles, key=lambda item: -item[1]):
            placed.insert(round(depth * len(parts)), needle)
        return prefix + "".join(placed) + suffix

    if isinstance(haystack, list):
        # Pieces of natural text: the most pieces that fit, found by bisection, so the prompt lands within one
        # piece of the target length whatever the pieces' sizes.
        low, high = 1, max(2, 2 * len(body))
        whole = [sentences[i % len(sentences)] for i in range(high)]
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if count(assemble(whole[:middle])) <= length else (low, middle - 1)
        return assemble(whole[:low])
    while len(body) > 1 and count(assemble(body)) > length:
        body = body[: max(1, int(len(body) * 0.95))]
    return assemble(body)


def passkey_samples(tokenizer, lengths: list[int], depths: list[float], per_cell: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for length in lengths:
        for depth in depths:
            for _ in range(per_cell):
                key = str(rng.randint(10000, 99999))
                needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
                prompt = _fill_to_length(tokenizer, PASSKEY_INSTRUCTION, [(needle, depth)], PASSKEY_QUESTION, length)
                samples.append(Sample(prompt, key, length, depth))
    return samples


def niah_samples(tokenizer, lengths: list[int], depths: list[float], per_cell: int, seed: int,
                 distractors: int = 0) -> list[Sample]:
    """RULER niah_single_1 (``distractors=0``) or niah_multikey_1 (needles for other keys spread through the
    haystack)."""
    rng = random.Random(seed + 7919 * distractors)
    samples = []
    for length in lengths:
        for depth in depths:
            for _ in range(per_cell):
                keys = rng.sample(NIAH_KEYS, 1 + distractors)
                values = [str(rng.randint(1_000_000, 9_999_999)) for _ in keys]
                needle = f"One of the special magic numbers for {keys[0]} is: {values[0]}. "
                question = (f"\nWhat is the special magic number for {keys[0]} mentioned in the provided text? "
                            f"The special magic number for {keys[0]} mentioned in the provided text is")
                distractors_placed = [(f"One of the special magic numbers for {key} is: {value}. ", rng.random())
                                      for key, value in zip(keys[1:], values[1:])]
                prompt = _fill_to_length(tokenizer, "", [(needle, depth), *distractors_placed], question, length)
                samples.append(Sample(prompt, values[0], length, depth))
    return samples


@dataclass
class MQARSample:
    input_ids: list[int]
    target_positions: list[int]  # positions whose next token is a queried value
    targets: list[int]
    pairs: int
    stale: list[int] | None = None  # interference: each query's value written first (now overwritten)


def mqar_samples(vocab_size: int, pairs_list: list[int], queries: int, per_setting: int, seed: int,
                 reserved: int = 0) -> list[MQARSample]:
    """Keys from ``[reserved, mid)``, values from ``[mid, vocab_size)``: ``k1 v1 ... kn vn`` then ``queries``
    queried keys each followed by its value; the model must predict each value from its key."""
    rng = random.Random(seed)
    middle = reserved + (vocab_size - reserved) // 2
    key_pool, value_pool = list(range(reserved, middle)), list(range(middle, vocab_size))
    samples = []
    for pairs in pairs_list:
        if pairs > min(len(key_pool), len(value_pool)):
            raise ValueError(f"MQAR with {pairs} pairs needs a vocabulary of more than {2 * pairs + reserved}")
        for _ in range(per_setting):
            keys, values = rng.sample(key_pool, pairs), rng.sample(value_pool, pairs)
            ids = [token for pair in zip(keys, values) for token in pair]
            samples.append(_queried(ids, keys, values, rng.sample(range(pairs), min(queries, pairs))))
    return samples


def _queried(ids: list[int], keys: list[int], values: list[int], asked: list[int]) -> MQARSample:
    """``ids`` followed by each asked key and its value; the sample scores the values."""
    positions, targets = [], []
    for index in asked:
        ids.append(keys[index])
        positions.append(len(ids) - 1)
        targets.append(values[index])
        ids.append(values[index])
    return MQARSample(ids, positions, targets, len(keys))


def mqar_token_range(tokenizer, vocab_size: int | None) -> tuple[int, int]:
    """``[low, high)``: token ids for MQAR keys and values, inside the vocabulary, special tokens kept out."""
    limits = [v for v in (vocab_size, None if tokenizer is None else len(tokenizer)) if v]
    low, high = 0, min(limits)
    for special in sorted(getattr(tokenizer, "all_special_ids", None) or []):
        if low <= special < high:
            if special - low < high - special:
                low = special + 1
            else:
                high = special
    return low, high


def mqar_gap_setup(tokenizer, vocab_size: int | None) -> tuple[list[int], list[int], list[int]]:
    """``(filler, keys, values)`` for mqar-gap with this tokenizer and vocabulary: what the training documents
    (``data``) and the evaluation (``evaluation``) both build on."""
    filler = mqar_gap_filler(tokenizer)
    keys, values = mqar_gap_pools(filler, *mqar_token_range(tokenizer, vocab_size))
    return filler, keys, values


def mqar_gap_filler(tokenizer) -> list[int]:
    """The haystack of mqar-gap as token ids: the passkey filler, tokenised once."""
    return list(tokenizer(FILLER * 4, add_special_tokens=False)["input_ids"])


def mqar_gap_pools(filler_ids: list[int], low: int, high: int) -> tuple[list[int], list[int]]:
    """Key and value pools for mqar-gap: the ids in ``[low, high)`` that the haystack never uses, split in halves."""
    used = set(filler_ids)
    free = [i for i in range(low, high) if i not in used]
    return free[: len(free) // 2], free[len(free) // 2 :]


def mqar_gap_samples(filler_ids: list[int], keys: list[int], values: list[int], lengths: list[int], pairs: int,
                     queries: int, per_length: int, seed: int) -> list[MQARSample]:
    """``k1 v1 ... kn vn``, then haystack token ids (``filler_ids`` from a random offset, repeated), then ``queries``
    queried keys each followed by its value; about ``length`` tokens in all (never fewer than the pairs and queries
    need). ``keys`` and ``values`` must not occur in ``filler_ids`` (see :func:`mqar_gap_pools`)."""
    if pairs > min(len(keys), len(values)):
        raise ValueError(f"mqar-gap with {pairs} pairs needs {pairs} free key and value ids; "
                         f"{min(len(keys), len(values))} are free of the haystack")
    rng = random.Random(seed)
    samples = []
    for length in lengths:
        for _ in range(per_length):
            chosen_keys, chosen_values = rng.sample(keys, pairs), rng.sample(values, pairs)
            ids = [token for pair in zip(chosen_keys, chosen_values) for token in pair]
            asked = rng.sample(range(pairs), min(queries, pairs))
            gap = max(0, length - len(ids) - 2 * len(asked))
            offset = rng.randrange(len(filler_ids))
            ids.extend(filler_ids[(offset + i) % len(filler_ids)] for i in range(gap))
            samples.append(_queried(ids, chosen_keys, chosen_values, asked))
    return samples


def default_long_text() -> str:
    """About 465K characters of English prose that every Python installation ships (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


# ----------------------------------------------------------------------------------------------------------------
# Recall in natural text: the FwPKM form of NIAH, and repeat-after-gap. Training haystacks are the standard
# library's docstrings; evaluation haystacks are pydoc_data.topics (held out of every training mixture).

FWPKM_NEEDLES = 5
FWPKM_NEEDLE = "The value of key {key} is {value}. "  # one statement of NIAH in the FwPKM form
FWPKM_QUESTION = "\nWhat is the value of key {key}? The value of key {key} is"  # its question; the answer follows
KEY_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ"  # no I or O: they read as digits
REPEAT_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


@functools.cache
def docstring_text(min_chars: int = 200) -> str:
    """English prose that every Python installation ships and no evaluation uses: the standard library's longer
    docstrings (test suites and the packages ``data.STDLIB_SKIP`` names left out), in sorted path order."""
    import ast
    import sysconfig
    from pathlib import Path

    skip = {"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__"}
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(root.rglob("*.py")):
        if set(path.relative_to(root).parts[:-1]) & skip:
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    texts.append(" ".join(doc.split()))
    return " ".join(texts)


def _haystack_window(haystack: str, rng: random.Random, chars: int, piece_chars: int = 40) -> list[str]:
    """About ``chars`` characters of ``haystack`` from a random word on (wrapping around), as pieces of at least
    ``piece_chars`` characters cut at spaces: natural text has long sentences, and needles go between pieces, so
    short pieces place them at the depth asked for and the prompt within a piece of its length. Words longer than
    24 characters (rules, URLs, tables in docstrings) are left out."""
    start = haystack.find(" ", rng.randrange(len(haystack))) + 1
    words = [w for w in (haystack + " " + haystack)[start : start + chars].split(" ")[1:-1] if 0 < len(w) <= 24]
    pieces, current = [], ""
    for word in words:
        current += word + " "
        if len(current) >= piece_chars:
            pieces.append(current)
            current = ""
    return pieces or [current or "... "]


def fwpkm_niah_samples(tokenizer, haystack: str, lengths: list[int], depths: list[float], per_cell: int,
                       seed: int, needles: int = FWPKM_NEEDLES) -> list[Sample]:
    """NIAH in the FwPKM form: ``needles`` statements "The value of key ABCD is 123456." (4-character keys,
    6-digit values) spread through a natural-text ``haystack``, the queried one at ``depth``, then the question;
    the answer is the 6 digits."""
    rng = random.Random(seed + 104729)
    samples = []
    for length in lengths:
        for depth in depths:
            for _ in range(per_cell):
                [(prompt, answer)] = _fwpkm_turns(tokenizer, haystack, rng, length, depth, needles, 1)
                samples.append(Sample(prompt, answer, length, depth))
    return samples


def fwpkm_niah_queries(tokenizer, haystack: str, length: int, depth: float, needles: int, queries: int,
                       seed: int) -> list[tuple[str, str]]:
    """One NIAH document in the FwPKM form that asks ``queries`` of its ``needles`` keys in turn (a training form
    with several answers per document; the first asked sits at ``depth``, the others are drawn without
    repeats): ``[(text, answer), ...]``, the document being ``text + " " + answer`` of each turn in order, every
    later text opening with the "." that ends the answer before it. About ``length`` tokens in all, or more when
    the needles and the turns alone take more (one haystack piece always remains): many questions leave little
    haystack in a short document."""
    if not 1 <= queries <= needles:
        raise ValueError(f"fwpkm_niah_queries: queries ({queries}) must be between 1 and the needles ({needles})")
    return _fwpkm_turns(tokenizer, haystack, random.Random(seed + 104729), length, depth, needles, queries)


def _fwpkm_turns(tokenizer, haystack: str, rng: random.Random, length: int, depth: float, needles: int,
                 queries: int) -> list[tuple[str, str]]:
    keys = ["".join(rng.choices(KEY_ALPHABET, k=4)) for _ in range(needles)]
    while len(set(keys)) < needles:
        keys[rng.randrange(needles)] = "".join(rng.choices(KEY_ALPHABET, k=4))
    values = [str(rng.randint(100_000, 999_999)) for _ in keys]
    placed = [(FWPKM_NEEDLE.format(key=keys[0], value=values[0]), depth)]
    placed += [(FWPKM_NEEDLE.format(key=key, value=value), rng.random())
               for key, value in zip(keys[1:], values[1:])]
    asked = [0] + (rng.sample(range(1, needles), queries - 1) if queries > 1 else [])
    questions = [("." if turn else "") + FWPKM_QUESTION.format(key=keys[i]) for turn, i in enumerate(asked)]
    # the haystack fills what the needles and every turn but the last's question leave
    tail = "".join(q + " " + values[i] for q, i in zip(questions[:-1], asked)) + questions[-1]
    text = _haystack_window(haystack, rng, 8 * length)
    prompt = _fill_to_length(tokenizer, "", placed, tail, length, haystack=text)
    first = prompt[: len(prompt) - len(tail)] + questions[0]
    return [(first, values[asked[0]])] + [(q, values[i]) for q, i in zip(questions[1:], asked[1:])]


def repeat_samples(tokenizer, haystack: str, lengths: list[int], per_cell: int, seed: int,
                   chars: int = 24) -> list[Sample]:
    """Repeat-after-gap: a random ``chars``-character string to remember, a natural-text gap filling the prompt to
    about ``length`` tokens, then the request; the answer is the string."""
    rng = random.Random(seed + 15485863)
    samples = []
    for length in lengths:
        for _ in range(per_cell):
            secret = "".join(rng.choices(REPEAT_ALPHABET, k=chars))
            text = _haystack_window(haystack, rng, 8 * length)
            prompt = _fill_to_length(tokenizer, f"Remember this string: {secret}\n", [],
                                     "\nRepeat the string you were asked to remember:", length, haystack=text)
            samples.append(Sample(prompt, secret, length, 0.0))
    return samples


def mqar_interference_samples(filler_ids: list[int], keys: list[int], values: list[int], lengths: list[int],
                              pairs: int, per_length: int, seed: int) -> list[MQARSample]:
    """MQAR with an overwrite: pairs A ``k v``, then the same keys with new values (pairs B), a haystack gap, then
    every key queried; the newest value is the target. Keys and values come from ids the haystack never uses."""
    if pairs > len(keys) or 2 * pairs > len(values):
        raise ValueError(f"mqar interference with {pairs} pairs needs {pairs} keys and {2 * pairs} values free of "
                         f"the haystack; {len(keys)} and {len(values)} are")
    rng = random.Random(seed + 7727)
    samples = []
    for length in lengths:
        for _ in range(per_length):
            chosen_keys = rng.sample(keys, pairs)
            chosen = rng.sample(values, 2 * pairs)
            old, new = chosen[:pairs], chosen[pairs:]
            ids = [t for pair in zip(chosen_keys, old) for t in pair] + [t for pair in zip(chosen_keys, new)
                                                                          for t in pair]
            asked = rng.sample(range(pairs), pairs)
            gap = max(0, length - len(ids) - 2 * len(asked))
            offset = rng.randrange(len(filler_ids))
            ids.extend(filler_ids[(offset + i) % len(filler_ids)] for i in range(gap))
            samples.append(_queried(ids, chosen_keys, new, asked))
    return samples
