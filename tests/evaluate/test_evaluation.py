"""eval-model: segment-wise NLL with the state carried, the seeded task generators and their scoring, and the
console script end to end (summary, CSV and plots for two models side by side, identical across runs).

The two end-to-end runs are subprocesses started when the module starts (they run while the in-process tests
run) and checked at the end. Refusals call the console script's entry point in-process (``eval_main`` with
``sys.argv`` set): they fail before any model is loaded, and the same code prints the error and sets the status.
The models are the random tiny test model (``tiny_random``) and its upgrade: small and fast.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from checkpoints import TINY_RANDOM_NAME
from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM, upgrade_model
from palimpsa.upgrade.cli.eval_model import main as eval_main
from palimpsa.upgrade.evaluate.evaluation import mqar_accuracy, niah_correct, nll_by_position, passkey_correct
from palimpsa.upgrade.evaluate.tasks import default_long_text, mqar_samples, niah_samples, passkey_samples
from palimpsa.upgrade.model.cache import PalimpsaCache
from transformers import AutoTokenizer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PREFIX = "eval-model: error: "
PROGRESS = re.compile(r"^[^:]*: +\d+%\|")
UPGRADED = "tiny-palimpsa"  # the directory name is the model's name in the outputs
BASE = TINY_RANDOM_NAME  # the base model's directory name
EVAL_ARGS = ["--lengths", "64,128", "--depths", "0,1", "--samples", "1", "--mqar-pairs", "4,8", "--train-length", "64"]
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"
NEEDLE = re.compile(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d+)\. ")


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("evaluation")


@pytest.fixture(scope="module")
def tokenizer(tiny_random):
    return AutoTokenizer.from_pretrained(str(tiny_random))


def token_count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module", autouse=True)
def eval_runs(root, tiny_random):
    """Two identical ``eval-model`` runs (upgraded tiny model vs the tiny mamba_ssm checkpoint), in the
    background."""
    model = root / UPGRADED
    upgrade_model(tiny_random, 2, output=model)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
    processes = {}
    for run in ("first", "second"):
        args = ["eval-model", str(model), "--compare", str(tiny_random), *EVAL_ARGS, "--output", str(root / run)]
        processes[run] = subprocess.Popen(args, cwd=root, env=env, text=True, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
    results: dict[str, subprocess.CompletedProcess] = {}

    def result(run: str) -> subprocess.CompletedProcess:
        if run not in results:
            stdout, stderr = processes[run].communicate(timeout=600)
            results[run] = subprocess.CompletedProcess(processes[run].args, processes[run].returncode, stdout, stderr)
        return results[run]

    yield result
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


# ------------------------------------------------------------------------- segment-wise NLL, state carried


def random_palimpsa_model() -> PalimpsaForCausalLM:
    config = PalimpsaConfig(d_model=32, n_layer=3, vocab_size=64, d_state=8, headdim=8, upgraded_layers=[1],
                            beta_init=0.5)
    torch.manual_seed(0)
    model = PalimpsaForCausalLM(config).eval()
    with torch.no_grad():  # larger weights than the default init, so that every layer and the history matter
        for name, param in model.named_parameters():
            if name.endswith(("in_proj.weight", "out_proj.weight", "beta_down.weight", "beta_up.weight")):
                param.normal_(std=param.shape[1] ** -0.5)
            elif name.endswith("embedding.weight"):
                param.normal_(std=0.3)
    return model


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-6)])
@pytest.mark.parametrize("segment_length", [1, 7, 16, None])
def test_segmentwise_nll_equals_full_forward(segment_length, dtype, tolerance):
    """Segments of 1 (token by token), 7 (shorter than the conv history plus more), 16 and the whole text."""
    model = random_palimpsa_model().to(dtype)
    ids = torch.randint(0, 64, (61,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(ids[None]).logits[0, :-1]
    expected = F.cross_entropy(logits.float(), ids[1:], reduction="none")
    nll = nll_by_position(model, ids, segment_length=segment_length or ids.numel())
    assert nll.shape == (ids.numel() - 1,)
    assert (nll - expected).abs().max().item() <= tolerance


def test_segmentwise_nll_really_depends_on_the_carried_state():
    """Without the state carried (a fresh cache per segment) the NLL differs: the test above is not vacuous."""
    model = random_palimpsa_model()
    ids = torch.randint(0, 64, (61,), generator=torch.Generator().manual_seed(3))
    carried = nll_by_position(model, ids, segment_length=16)
    pieces = []
    with torch.no_grad():
        for start in range(0, ids.numel() - 1, 16):
            segment = ids[start : min(start + 16, ids.numel() - 1)]
            logits = model(segment[None], cache_params=PalimpsaCache(3)).logits[0]
            pieces.append(F.cross_entropy(logits, ids[start + 1 : start + 1 + segment.numel()], reduction="none"))
    fresh = torch.cat(pieces)
    assert torch.allclose(carried[:16], fresh[:16], atol=1e-5)  # the first segment has no history either way
    assert (carried[16:] - fresh[16:]).abs().max().item() > 1e-2


def test_evaluate_model_needs_only_a_model_and_its_tokenizer(tokenizer):
    """The public ``evaluate_model``: settings default to eval-model's, and the long text of nll-position is taken
    from the settings when not given, the same as the command passes it."""
    from palimpsa.upgrade import evaluate_model
    from palimpsa.upgrade.evaluate.evaluation import EvalSettings, text_token_ids

    settings = EvalSettings(tasks=["nll-position"], lengths=[48], segment_length=16)
    torch.manual_seed(0)
    model = PalimpsaForCausalLM(PalimpsaConfig(d_model=16, n_layer=2, vocab_size=272, d_state=8, headdim=8,
                                               upgraded_layers=[1])).eval()  # the tokenizer's 257 ids, padded
    alone = evaluate_model("m", model, tokenizer, settings, progress=False)
    given = evaluate_model("m", model, tokenizer, settings, text_token_ids(tokenizer, settings), progress=False)
    assert alone == given and len(alone["nll_position"]["mean_nll"]) == settings.nll_buckets
    assert EvalSettings().tasks == ["nll-position", "passkey", "niah", "mqar"]


# ---------------------------------------------------------------------------------------- task generators


def test_passkey_format(tokenizer):
    lengths, depths = [512, 1024, 2048], [0.0, 0.5, 1.0]
    samples = passkey_samples(tokenizer, lengths, depths, per_cell=2, seed=0)
    assert len(samples) == len(lengths) * len(depths) * 2
    assert [(s.length, s.depth) for s in samples[:4]] == [(512, 0.0), (512, 0.0), (512, 0.5), (512, 0.5)]
    for sample in samples:
        key = sample.answer
        assert re.fullmatch(r"[1-9]\d{4}", key), key
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        assert sample.prompt.count(needle) == 1
        assert sample.prompt.count(key) == 2  # only in the needle: the filler holds no digits
        assert sample.prompt.startswith("There is an important info hidden inside a lot of irrelevant text.")
        assert sample.prompt.endswith(PASSKEY_QUESTION)
        count = token_count(tokenizer, sample.prompt)
        assert 0.9 * sample.length <= count <= sample.length, (sample.length, count)
        instruction_end = sample.prompt.index("\n") + 1
        if sample.depth == 0.0:
            assert sample.prompt[instruction_end:].startswith(needle)
        elif sample.depth == 1.0:
            assert sample.prompt.endswith(needle + " " + PASSKEY_QUESTION)
        else:  # halfway through the haystack between the instruction and the question
            haystack = len(sample.prompt) - instruction_end - len(needle) - 1 - len(PASSKEY_QUESTION)
            position = (sample.prompt.index(needle) - instruction_end) / haystack
            assert 0.4 < position < 0.6, position


def test_niah_single_format(tokenizer):
    samples = niah_samples(tokenizer, [256, 1024], [0.0, 0.5, 1.0], per_cell=2, seed=0)
    assert len(samples) == 12
    for sample in samples:
        assert sample.prompt.count("One of the special magic numbers for") == 1
        (key, value), = NEEDLE.findall(sample.prompt)
        assert re.fullmatch(r"\d{7}", value) and value == sample.answer
        assert f"What is the special magic number for {key} mentioned in the provided text?" in sample.prompt
        assert sample.prompt.endswith(f"The special magic number for {key} mentioned in the provided text is")
        needle = f"One of the special magic numbers for {key} is: {value}. "
        if sample.depth == 0.0:
            assert sample.prompt.startswith(needle)
        elif sample.depth == 1.0:
            assert sample.prompt.endswith(needle + "\nWhat is the special magic number for " + key
                                          + " mentioned in the provided text? The special magic number for "
                                          + key + " mentioned in the provided text is")


def test_niah_multikey_format(tokenizer):
    """Four intact needles (RULER niah_multikey_1: the queried one and three distractors with other keys), each
    a whole sentence; the answer is the queried key's value."""
    for seed in range(4):
        samples = niah_samples(tokenizer, [256, 512], [0.0, 0.5, 1.0], per_cell=2, seed=seed, distractors=3)
        for sample in samples:
            prompt = sample.prompt
            assert prompt.count("special magic numbers for") == 4, prompt
            needles = NEEDLE.findall(prompt)
            assert len(needles) == 4, f"seed {seed}, depth {sample.depth}: a needle is damaged: {prompt[:160]!r}"
            keys = [key for key, _ in needles]
            assert len(set(keys)) == 4
            queried = re.search(r"What is the special magic number for ([a-z]+-[a-z]+) mentioned", prompt).group(1)
            assert queried in keys
            assert dict(needles)[queried] == sample.answer
            assert all(re.fullmatch(r"\d{7}", value) for _, value in needles)
            for match in NEEDLE.finditer(prompt):  # each needle starts a sentence
                assert match.start() == 0 or prompt[match.start() - 2 : match.start()] == ". ", (
                    f"seed {seed}: needle inserted mid-word: {prompt[max(0, match.start() - 20):match.end()]!r}")


@pytest.mark.parametrize("distractors", [0, 3])
def test_niah_length_near_the_target(tokenizer, distractors):
    """Like passkey, a NIAH prompt should be about the target length, erring below it (multi-key included: the
    haystack must make room for the distractor needles)."""
    for sample in niah_samples(tokenizer, [1024, 2048], [0.0, 0.5, 1.0], 1, 0, distractors):
        count = token_count(tokenizer, sample.prompt)
        assert 0.9 * sample.length <= count <= sample.length, (distractors, sample.length, count)


def test_mqar_format():
    vocab, reserved = 64, 8
    middle = reserved + (vocab - reserved) // 2
    samples = mqar_samples(vocab, [4, 8, 16], queries=4, per_setting=3, seed=0, reserved=reserved)
    assert [s.pairs for s in samples] == [4] * 3 + [8] * 3 + [16] * 3
    for sample in samples:
        ids, pairs = sample.input_ids, sample.pairs
        keys, values = ids[0 : 2 * pairs : 2], ids[1 : 2 * pairs : 2]
        assert all(reserved <= k < middle for k in keys)
        assert all(middle <= v < vocab for v in values)
        assert len(set(keys)) == pairs and len(set(values)) == pairs
        value_of = dict(zip(keys, values))
        assert len(ids) == 2 * pairs + 2 * len(sample.targets)
        assert len(sample.targets) == len(sample.target_positions) == 4
        assert len({ids[p] for p in sample.target_positions}) == 4  # distinct queried keys
        for position, target in zip(sample.target_positions, sample.targets):
            assert position >= 2 * pairs
            assert ids[position] in value_of  # a queried key ...
            assert target == value_of[ids[position]]  # ... whose value is the target ...
            assert ids[position + 1] == target  # ... and the next token
    few = mqar_samples(vocab, [2], queries=4, per_setting=1, seed=0)[0]
    assert len(few.targets) == 2  # no more queries than pairs
    with pytest.raises(ValueError, match="vocabulary"):
        mqar_samples(vocab, [29], queries=4, per_setting=1, seed=0, reserved=8)


def test_generators_are_seeded(tokenizer):
    def make(seed: int):
        return (passkey_samples(tokenizer, [512], [0.0, 1.0], 2, seed),
                niah_samples(tokenizer, [512], [0.5], 2, seed),
                niah_samples(tokenizer, [512], [0.5], 2, seed, distractors=3),
                mqar_samples(64, [4, 8], 4, 2, seed, reserved=8))

    first, again, other = make(0), make(0), make(1)
    assert first == again
    for a, b in zip(first, other):
        assert a != b
    assert [s.answer for s in first[0]] != [s.answer for s in other[0]]


def test_default_long_text():
    text = default_long_text()
    assert len(text) > 200_000 and text == default_long_text()


# ------------------------------------------------------------------------------------------------- scoring


@pytest.mark.parametrize("completion, correct", [
    ("12345", True), (" 12345.", True), ("12345 and more", True), (": 12345\n", True), ("is 12345", True),
    ("123456", False), ("1234", False), ("54321 12345", False), ("", False), ("no digits", False),
    ("1 2345", False), ("012345", False),
])
def test_passkey_correct(completion, correct):
    assert passkey_correct(completion, "12345") is correct


@pytest.mark.parametrize("completion, correct", [
    ("1234567", True), (" 1234567.", True), ("is: 1234567\n", True), ("7654321 then 1234567", True),
    ("123456", False), ("1234 567", False), ("", False), ("7654321", False),
])
def test_niah_correct(completion, correct):
    assert niah_correct(completion, "1234567") is correct


class StubLM(torch.nn.Module):
    """A model whose logits at each position are one-hot at ``predict(ids, position)``."""

    def __init__(self, vocab: int, predict):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab, base_vocab_size=vocab)
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.predict = vocab, predict

    def forward(self, input_ids):
        batch, length = input_ids.shape
        logits = torch.zeros(batch, length, self.vocab)
        for b in range(batch):
            for t in range(length):
                logits[b, t, self.predict(input_ids[b].tolist(), t)] = 1.0
        return SimpleNamespace(logits=logits)


def test_mqar_accuracy_of_a_model_that_is_always_right():
    samples = mqar_samples(64, [4, 8], queries=4, per_setting=3, seed=0, reserved=8)

    def oracle(ids, t):  # knows the sequence: predicts the token that follows
        return ids[t + 1] if t + 1 < len(ids) else 0

    assert mqar_accuracy(StubLM(64, oracle), samples) == {4: 1.0, 8: 1.0}


def test_mqar_accuracy_of_a_constant_model():
    samples = mqar_samples(64, [4, 8], queries=4, per_setting=3, seed=0, reserved=8)
    assert mqar_accuracy(StubLM(64, lambda ids, t: 3), samples) == {4: 0.0, 8: 0.0}


def test_mqar_accuracy_counts_each_query():
    samples = mqar_samples(64, [4, 8], queries=4, per_setting=3, seed=0, reserved=8)
    first_query = {tuple(s.input_ids): s.target_positions[0] for s in samples}

    def right_on_first_query(ids, t):
        return ids[t + 1] if t == first_query[tuple(ids)] else 3

    assert mqar_accuracy(StubLM(64, right_on_first_query), samples) == {4: 0.25, 8: 0.25}


# ----------------------------------------------------------------------------------------- eval-model refusals


@pytest.mark.parametrize("args, match", [
    (["--tasks", "passkey,bogus"], r"unknown task\(s\) \['bogus'\]"),
    (["--tasks", ","], r"unknown task"),
    (["--lengths", "abc"], r"cannot read 'abc'"),
    (["--lengths", "64,0"], r"--lengths value '0' must be an integer from 1 to 1048576"),
    (["--mqar-pairs", "4,x"], r"cannot read 'x'"),
    (["--depths", "0,1.5"], r"--depths value must be a finite number in \[0, 1\], got '1\.5'"),
    (["--depths", "-0.1"], r"--depths value must be a finite number in \[0, 1\]"),
    (["--depths", "half"], r"--depths value must be a finite number in \[0, 1\], got 'half'"),
    (["--samples", "0"], r"--samples must be an integer from 1 to 10000"),
])
def test_eval_refusals(root, tiny_random, monkeypatch, capsys, args, match):
    output = root / "refused"
    monkeypatch.setattr(sys, "argv", ["eval-model", str(tiny_random), *args, "--output", str(output)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        eval_main()
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    assert "Traceback" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip() and not PROGRESS.match(line)]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(PREFIX) and re.search(match, lines[0]), lines[0]
    assert not output.exists()


# ------------------------------------------------------------------------------ eval-model end to end (CLI)


def assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1024, (path, len(data))


def test_cli_runs(eval_runs):
    for run in ("first", "second"):
        result = eval_runs(run)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "# Evaluation summary" in result.stdout


def test_cli_summary_markdown(eval_runs, root):
    eval_runs("first")
    text = (root / "first" / "summary.md").read_text()
    lines = text.splitlines()
    assert f"| metric | {UPGRADED} | {BASE} |" in lines
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ") and "metric" not in line}
    expected = ["NLL, all positions", "NLL within 64", "NLL beyond 64", "MQAR 4 pairs", "MQAR 8 pairs"]
    for length in (64, 128):
        expected += [f"passkey @ {length}", f"NIAH single @ {length}", f"NIAH multi-key @ {length}"]
    assert sorted(rows) == sorted(expected)
    for label, line in rows.items():
        cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
        assert len(cells) == 2 and all(re.fullmatch(r"\d+\.\d{3}", c) for c in cells), (label, line)


def test_cli_summary_json(eval_runs, root):
    eval_runs("first")
    summary = json.loads((root / "first" / "summary.json").read_text())
    settings = summary["settings"]
    assert settings["lengths"] == [64, 128] and settings["depths"] == [0.0, 1.0]
    assert settings["mqar_pairs"] == [4, 8] and settings["train_length"] == 64 and settings["seed"] == 0
    models = summary["models"]
    assert [m["name"] for m in models] == [UPGRADED, BASE]
    for model in models:
        nll = model["nll_position"]
        assert len(nll["bucket_start"]) == len(nll["bucket_end"]) == len(nll["mean_nll"])
        assert nll["bucket_start"][0] == 1 and nll["bucket_end"][-1] == 128
        assert nll["within_train_length"] is not None and nll["beyond_train_length"] is not None
        for grid in (model["passkey"], model["niah"]["single"], model["niah"]["multikey"]):
            assert grid["lengths"] == [64, 128] and grid["depths"] == [0.0, 1.0]
            assert len(grid["accuracy"]) == 2 and all(len(row) == 2 for row in grid["accuracy"])
            assert all(0.0 <= a <= 1.0 for row in grid["accuracy"] for a in row)
            assert len(grid["by_length"]) == 2
        assert sorted(model["mqar"]) == ["4", "8"]
    # identical inputs: at its initial beta the upgraded model computes what its base computes
    upgraded, base = (m["nll_position"] for m in models)
    assert upgraded["overall"] == pytest.approx(base["overall"], abs=1e-3)
    assert upgraded["mean_nll"] == pytest.approx(base["mean_nll"], abs=1e-3)


def test_cli_nll_csv(eval_runs, root):
    eval_runs("first")
    models = json.loads((root / "first" / "summary.json").read_text())["models"]
    with open(root / "first" / "nll_position.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["position_start", "position_end", UPGRADED, BASE]
    body = rows[1:]
    assert len(body) == len(models[0]["nll_position"]["mean_nll"])
    assert all(len(row) == 4 for row in body)
    for index, model in enumerate(models):
        assert [float(row[2 + index]) for row in body] == pytest.approx(model["nll_position"]["mean_nll"])
    assert [int(row[0]) for row in body] == models[0]["nll_position"]["bucket_start"]


def test_cli_plots(eval_runs, root):
    eval_runs("first")
    output = root / "first"
    for name in ("nll_position.png", f"passkey_{UPGRADED}.png", f"passkey_{BASE}.png", "niah.png", "mqar.png"):
        assert_png(output / name)
    assert sorted(p.name for p in output.iterdir()) == sorted([
        "summary.json", "summary.md", "nll_position.csv", "nll_position.png", f"passkey_{UPGRADED}.png",
        f"passkey_{BASE}.png", "niah.png", "mqar.png"])


def test_cli_is_deterministic(eval_runs, root):
    eval_runs("first"), eval_runs("second")
    first = json.loads((root / "first" / "summary.json").read_text())
    second = json.loads((root / "second" / "summary.json").read_text())
    assert first["models"] == second["models"]
    assert (root / "first" / "nll_position.csv").read_text() == (root / "second" / "nll_position.csv").read_text()


def test_the_nll_plot_says_when_curves_coincide(tmp_path):
    """Two models with the same NLL curve (an upgraded model at beta scale 0 and its base) would print as one line:
    the later one is drawn dashed with hollow markers, its legend entry names the curve it lies on, and the plot
    returns the pair; curves that differ are left as they are."""
    from palimpsa.upgrade.evaluate import plots

    def result(name: str, nll: list[float]) -> dict:
        return {"name": name, "nll_position": {"bucket_start": [0, 64, 128], "bucket_end": [64, 128, 192],
                                               "mean_nll": nll}}

    drawn = []
    real_plot = plots.plt.Axes.plot

    def recording_plot(axis, *args, **kwargs):
        drawn.append(kwargs)
        return real_plot(axis, *args, **kwargs)

    base, same, other = [3.0, 2.5, 2.25], [3.0, 2.5 + 1e-6, 2.25], [3.2, 2.9, 2.8]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots.plt.Axes, "plot", recording_plot)
        hidden = plots.plot_nll([result("base", base), result("beta 0", same), result("tuned", other)], 128,
                                tmp_path / "nll.png")
    assert hidden == {"beta 0": "base"}
    assert [kwargs["label"] for kwargs in drawn] == ["base", "beta 0 (on top of base: the curves coincide)", "tuned"]
    assert drawn[1]["linestyle"] == "--" and drawn[1]["markerfacecolor"] == "none"
    assert (tmp_path / "nll.png").stat().st_size > 0
    assert plots.plot_nll([result("a", base), result("b", other)], None, tmp_path / "two.png") == {}
