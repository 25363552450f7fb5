"""eval-model: long-context evaluation of one or more models on identical seeded inputs, with plots and a summary.

Tasks: ``nll-position`` (per-token NLL against position on long text, run in segments with the recurrent state
carried, so any length fits in bounded memory), ``passkey`` (accuracy over length x depth), ``niah`` (RULER
single- and multi-key needle retrieval), ``mqar`` (accuracy against the number of key-value pairs), ``mqar-gap``
(accuracy against length: ``mqar_gap_pairs`` pairs, a haystack gap, then every key queried).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..errors import PalimpsaError
from ..io.output import write_json_atomic, write_text_atomic
from ..model.cache import PalimpsaCache
from ..model.sharding import fsdp_units, gathered
from .generation import left_padded
from .tasks import Sample, default_long_text, mqar_samples, niah_samples, passkey_samples

TASKS = ("nll-position", "passkey", "niah", "mqar", "mqar-gap")
DEFAULT_TASKS = ("nll-position", "passkey", "niah", "mqar")


@dataclass
class EvalSettings:
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    lengths: list[int] = field(default_factory=lambda: [256, 512, 1024])
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    per_cell: int = 2
    seed: int = 0
    segment_length: int = 512
    nll_length: int | None = None  # default: the largest of ``lengths``
    nll_buckets: int = 16
    mqar_pairs: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    mqar_queries: int = 4
    mqar_gap_pairs: int = 8
    train_length: int | None = None
    text: str | None = None  # a text file for nll-position (default: pydoc_data.topics)
    batch_size: int = 4
    device: str = "cpu"
    beta_scale: float | None = None  # applied to every Palimpsa model (None: each model's own)


@torch.no_grad()
def nll_by_position(model, ids: torch.Tensor, segment_length: int, progress: bool = False) -> torch.Tensor:
    """Per-token NLL (nats) of ``ids`` ``[T]``, predicting token t+1 from tokens <= t; run in segments of
    ``segment_length`` with the recurrent state carried between them. Returns ``[T - 1]``."""
    device = next(model.parameters()).device
    cache = PalimpsaCache(model.config.n_layer)
    losses = []
    starts = range(0, ids.numel() - 1, segment_length)
    for start in tqdm(starts, desc="nll segments", disable=not progress, leave=False):
        segment = ids[start : min(start + segment_length, ids.numel() - 1)].to(device)
        targets = ids[start + 1 : start + 1 + segment.numel()].to(device)
        logits = model(segment[None], cache_params=cache).logits[0]
        losses.append(F.cross_entropy(logits.float(), targets, reduction="none").cpu())
    return torch.cat(losses)


@torch.no_grad()
def greedy_answers(model, tokenizer, samples: list[Sample], batch_size: int, progress: bool = False) -> list[str]:
    """Greedy completions (left-padded batches, on a copy of ``tokenizer``) long enough for each sample's answer."""
    device = next(model.parameters()).device
    tokenizer = left_padded(tokenizer)
    order = sorted(range(len(samples)), key=lambda i: samples[i].length)
    results: dict[int, str] = {}
    # Under FSDP2 a LoRA model's generate() reaches the wrapped model's forward, not the outer one around which FSDP
    # gathers the embeddings and the head: gather those (the blocks gather their own). Every decoding step gathers
    # weights across the ranks, so each rank steps until all are done (synced_gpus)
    synced = bool(fsdp_units(model)) and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    with gathered(model, holding=model.get_input_embeddings()):
        for first in tqdm(range(0, len(order), batch_size), desc="generating", disable=not progress, leave=False):
            chunk = order[first : first + batch_size]
            batch = tokenizer([samples[i].prompt for i in chunk], return_tensors="pt", padding=True).to(device)
            answer_tokens = max(len(tokenizer(samples[i].answer, add_special_tokens=False)["input_ids"])
                                for i in chunk)
            output = model.generate(**batch, max_new_tokens=answer_tokens + 4, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id, synced_gpus=synced)
            texts = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            results.update(zip(chunk, texts))
    return [results[i] for i in range(len(samples))]


def first_digits(completion: str) -> str:
    """The first run of digits in a completion: the answer of a task whose answer is a number ("" if none)."""
    digits = re.search(r"\d+", completion)
    return digits.group(0) if digits else ""


def passkey_correct(completion: str, answer: str) -> bool:
    return bool(answer) and first_digits(completion) == answer


def niah_correct(completion: str, answer: str) -> bool:
    return answer in completion


@torch.no_grad()
def mqar_accuracy(model, samples) -> dict[int, float]:
    device = next(model.parameters()).device
    hits: dict[int, list[int]] = {}
    for sample in samples:
        logits = model(torch.tensor([sample.input_ids], device=device)).logits[0]
        predicted = logits[sample.target_positions].argmax(-1).cpu().tolist()
        hits.setdefault(sample.pairs, []).extend(int(p == t) for p, t in zip(predicted, sample.targets))
    return {pairs: sum(h) / len(h) for pairs, h in sorted(hits.items())}


def mqar_gap_by_length(model, tokenizer, lengths: list[int], pairs: int, per_length: int, seed: int) -> list[float]:
    """MQAR accuracy at each length: ``pairs`` key-value pairs, a haystack gap, then every key queried."""
    from .tasks import mqar_gap_samples, mqar_gap_setup

    filler, keys, values = mqar_gap_setup(tokenizer, model.config.vocab_size)
    return [mqar_accuracy(model, mqar_gap_samples(filler, keys, values, [length], pairs, pairs, per_length,
                                                  seed + length))[pairs] for length in lengths]


def evaluate_model(name: str, model, tokenizer, settings: EvalSettings | None = None,
                   text_ids: torch.Tensor | None = None, progress: bool = True) -> dict:
    """Every task of ``settings`` (default: ``EvalSettings()``) on one model; returns a JSON-ready dict.
    ``text_ids``: the long text of nll-position, when several models share it (default: ``text_token_ids``)."""
    settings = settings or EvalSettings()
    result: dict = {"name": name}
    if "nll-position" in settings.tasks:
        if text_ids is None:
            text_ids = text_token_ids(tokenizer, settings)
        nll = nll_by_position(model, text_ids, settings.segment_length, progress)
        width = math.ceil(nll.numel() / settings.nll_buckets)
        buckets = [(start, min(start + width, nll.numel())) for start in range(0, nll.numel(), width)]
        result["nll_position"] = {"bucket_start": [b[0] + 1 for b in buckets], "bucket_end": [b[1] for b in buckets],
                                  "mean_nll": [nll[a:b].mean().item() for a, b in buckets],
                                  "overall": nll.mean().item()}
        if settings.train_length:
            inside = nll[: settings.train_length - 1]
            beyond = nll[settings.train_length - 1 :]
            result["nll_position"]["within_train_length"] = inside.mean().item()
            result["nll_position"]["beyond_train_length"] = beyond.mean().item() if beyond.numel() else None
    if "passkey" in settings.tasks:
        samples = passkey_samples(tokenizer, settings.lengths, settings.depths, settings.per_cell, settings.seed)
        completions = greedy_answers(model, tokenizer, samples, settings.batch_size, progress)
        result["passkey"] = _grid(samples, [passkey_correct(c, s.answer) for c, s in zip(completions, samples)],
                                  settings)
    if "niah" in settings.tasks:
        result["niah"] = {}
        for variant, distractors in (("single", 0), ("multikey", 3)):
            samples = niah_samples(tokenizer, settings.lengths, settings.depths, settings.per_cell, settings.seed,
                                   distractors)
            completions = greedy_answers(model, tokenizer, samples, settings.batch_size, progress)
            result["niah"][variant] = _grid(samples, [niah_correct(c, s.answer) for c, s in zip(completions, samples)],
                                            settings)
    if "mqar" in settings.tasks:
        reserved = 0 if tokenizer is None else min(256, len(tokenizer) // 4)
        vocab = model.config.base_vocab_size or model.config.vocab_size
        samples = mqar_samples(vocab, settings.mqar_pairs, settings.mqar_queries, settings.per_cell * 4,
                               settings.seed, reserved=min(reserved, vocab // 4))
        result["mqar"] = {str(k): v for k, v in mqar_accuracy(model, samples).items()}
    if "mqar-gap" in settings.tasks:
        if tokenizer is None:
            raise PalimpsaError("mqar-gap needs the model's tokenizer (its gap is haystack text)")
        result["mqar_gap"] = {"lengths": settings.lengths, "pairs": settings.mqar_gap_pairs,
                              "by_length": mqar_gap_by_length(model, tokenizer, settings.lengths,
                                                              settings.mqar_gap_pairs, 4 * settings.per_cell,
                                                              settings.seed)}
    return result


def _grid(samples: list[Sample], correct: list[bool], settings: EvalSettings) -> dict:
    grid = [[0.0 for _ in settings.lengths] for _ in settings.depths]
    counts = [[0 for _ in settings.lengths] for _ in settings.depths]
    for sample, ok in zip(samples, correct):
        row, column = settings.depths.index(sample.depth), settings.lengths.index(sample.length)
        grid[row][column] += ok
        counts[row][column] += 1
    accuracy = [[g / c if c else 0.0 for g, c in zip(gr, cr)] for gr, cr in zip(grid, counts)]
    by_length = [sum(accuracy[r][c] for r in range(len(settings.depths))) / len(settings.depths)
                 for c in range(len(settings.lengths))]
    return {"lengths": settings.lengths, "depths": settings.depths, "accuracy": accuracy, "by_length": by_length}


def text_token_ids(tokenizer, settings: EvalSettings) -> torch.Tensor:
    needed = (settings.nll_length or max(settings.lengths)) + 1
    if settings.text:
        try:
            text = Path(settings.text).read_text(errors="replace")
        except OSError as error:
            raise PalimpsaError(f"cannot read --text {settings.text}: {error.strerror}") from None
    else:
        text = default_long_text()
    ids = tokenizer(text[: needed * 16], add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    if ids.numel() < needed:
        raise PalimpsaError(f"the text has {ids.numel()} tokens, fewer than the {needed} asked for; "
                            "give a longer --text or a smaller length")
    return ids[:needed]


def write_outputs(results: list[dict], settings: EvalSettings, output: Path) -> dict:
    """summary.json, summary.md, nll_position.csv and the plots; returns the summary."""
    output.mkdir(parents=True, exist_ok=True)
    summary = {"settings": asdict(settings), "models": results}
    write_json_atomic(output / "summary.json", summary)
    write_text_atomic(output / "summary.md", summary_markdown(results, settings))
    if "nll-position" in settings.tasks:
        rows = zip(*([results[0]["nll_position"]["bucket_start"], results[0]["nll_position"]["bucket_end"]]
                     + [r["nll_position"]["mean_nll"] for r in results]))
        with open(output / "nll_position.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["position_start", "position_end"] + [r["name"] for r in results])
            writer.writerows(rows)
    from .plots import plot_grid, plot_lines, plot_nll

    if "nll-position" in settings.tasks:
        plot_nll(results, settings.train_length, output / "nll_position.png")
    for result in results:
        if "passkey" in result:
            plot_grid(result["passkey"], f"passkey: {result['name']}", output / f"passkey_{_slug(result['name'])}.png")
    if "niah" in settings.tasks:
        plot_lines({f"{r['name']} ({variant})": (settings.lengths, r["niah"][variant]["by_length"])
                    for r in results for variant in ("single", "multikey")},
                   "NIAH accuracy", "context length (tokens)", output / "niah.png", log_x=True)
    if "mqar" in settings.tasks:
        plot_lines({r["name"]: ([int(k) for k in r["mqar"]], list(r["mqar"].values())) for r in results},
                   "MQAR accuracy", "key-value pairs", output / "mqar.png", log_x=True)
    if "mqar-gap" in settings.tasks:
        plot_lines({r["name"]: (settings.lengths, r["mqar_gap"]["by_length"]) for r in results},
                   f"MQAR with a gap ({settings.mqar_gap_pairs} pairs)", "context length (tokens)",
                   output / "mqar_gap.png", log_x=True)
    return summary


def summary_markdown(results: list[dict], settings: EvalSettings) -> str:
    names = [r["name"] for r in results]
    scale = "" if settings.beta_scale is None else f" Every Palimpsa model ran at beta scale {settings.beta_scale:g}."
    lines = ["# Evaluation summary", "", f"Seed {settings.seed}; every model saw identical inputs.{scale}", "",
             "| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label: str, values: list) -> None:
        lines.append(f"| {label} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in values) + " |")

    if "nll-position" in settings.tasks:
        row("NLL, all positions", [r["nll_position"]["overall"] for r in results])
        if settings.train_length:
            row(f"NLL within {settings.train_length}", [r["nll_position"]["within_train_length"] for r in results])
            row(f"NLL beyond {settings.train_length}", [r["nll_position"]["beyond_train_length"] for r in results])
    for index, length in enumerate(settings.lengths):
        if "passkey" in settings.tasks:
            row(f"passkey @ {length}", [r["passkey"]["by_length"][index] for r in results])
        if "niah" in settings.tasks:
            row(f"NIAH single @ {length}", [r["niah"]["single"]["by_length"][index] for r in results])
            row(f"NIAH multi-key @ {length}", [r["niah"]["multikey"]["by_length"][index] for r in results])
        if "mqar-gap" in settings.tasks:
            row(f"MQAR-gap @ {length}", [r["mqar_gap"]["by_length"][index] for r in results])
    if "mqar" in settings.tasks:
        for pairs in results[0]["mqar"]:
            row(f"MQAR {pairs} pairs", [r["mqar"][pairs] for r in results])
    return "\n".join(lines) + "\n"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"
