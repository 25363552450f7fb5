"""Tests of the lm-evaluation-harness adapter (``palimpsa.upgrade.evaluate.lm_eval_adapter``); skipped without lm_eval.

Oracle: direct computation with the model (one full forward, log-softmax of the scored tokens; ``model.generate``
on each prompt alone). The adapter must reproduce it whatever the batching, padding and segmenting; and lm_eval's
``simple_evaluate`` must run the local tasks of tests/data/lm_eval_task (no download) end to end. The model is the
random tiny test model (``tiny_random``) with two layers upgraded: the adapter's machinery needs no trained model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from checkpoints import TEST_DATA

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # read when `datasets` is imported: the tasks' data are local
os.environ.setdefault("HF_HUB_OFFLINE", "1")

lm_eval = pytest.importorskip("lm_eval")

import palimpsa.upgrade  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from palimpsa.upgrade import upgrade_model  # noqa: E402
from palimpsa.upgrade.convert.loading import load_model_and_tokenizer  # noqa: E402
from palimpsa.upgrade.evaluate.evaluation import nll_by_position  # noqa: E402
from palimpsa.upgrade.evaluate.lm_eval_adapter import PalimpsaLM  # noqa: E402

PACKAGE = Path(palimpsa.upgrade.__file__).resolve().parent
ADAPTER, COMMAND = PACKAGE / "evaluate" / "lm_eval_adapter.py", PACKAGE / "cli" / "palimpsa_lm_eval.py"
TASKS = TEST_DATA / "lm_eval_task"
BETA_SCALE = 1000.0  # the upgraded tiny model's beta_init is 1e-3: scale it up so the Palimpsa layers matter

PAIRS = [
    ("The sky on a clear day is", " blue"),
    ("The sky on a clear day is ", "green"),  # trailing space: moved into the continuation
    ("", "hello"),  # empty context: the prefix token (EOS) stands for it
    ("Two plus two equals", " four, of course"),
    ("A much longer context, so that the batch is padded: one, two, three, four, five, six", " seven"),
    ("x", ""),  # empty continuation scores nothing
]
TEXTS = [
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "Call me Ishmael.",
    "",
    "In the beginning was the word.",
]


def requests(kind: str, arguments: list) -> list[Instance]:
    return [Instance(kind, {}, args if isinstance(args, tuple) else (args,), i) for i, args in enumerate(arguments)]


# ----------------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_random) -> Path:
    output = tmp_path_factory.mktemp("lm_eval") / "tiny-palimpsa"
    upgrade_model(str(tiny_random), 2, output=output, beta_init=1e-3)
    return output


@pytest.fixture(scope="module")
def loaded(model_dir):
    model, tokenizer = load_model_and_tokenizer(model_dir)
    model.set_beta_scale(BETA_SCALE)
    return model.float().eval(), tokenizer


def adapter(loaded, **kwargs) -> PalimpsaLM:
    model, tokenizer = loaded
    return PalimpsaLM(model, tokenizer=tokenizer, device="cpu", dtype="float32", **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# direct computation with the model (the oracle)


@torch.no_grad()
def direct_loglikelihood(model, tokenizer, context: str, continuation: str) -> tuple[float, bool]:
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation, add_special_tokens=False)
    split = len(tokenizer.encode(context, add_special_tokens=False))
    if split == 0:
        whole, split = [tokenizer.eos_token_id] + whole, 1
    if split == len(whole):
        return 0.0, True
    logp = model(torch.tensor([whole])).logits[0].double().log_softmax(-1)
    positions = torch.arange(split - 1, len(whole) - 1)
    targets = torch.tensor(whole[split:])
    return logp[positions, targets].sum().item(), bool((logp[positions].argmax(-1) == targets).all())


@torch.no_grad()
def direct_rolling(model, tokenizer, text: str) -> float:
    ids = [tokenizer.eos_token_id] + tokenizer.encode(text, add_special_tokens=False)
    if len(ids) == 1:
        return 0.0
    logp = model(torch.tensor([ids])).logits[0].double().log_softmax(-1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum().item()


@torch.no_grad()
def direct_generate(model, tokenizer, prompt: str, until: list[str], max_new_tokens: int) -> str:
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    output = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                            pad_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    text = tokenizer.decode(output[0, ids.shape[1]:], skip_special_tokens=True)
    return text[: min([text.find(stop) for stop in until if stop in text], default=len(text))]


# ----------------------------------------------------------------------------------------------------------------
# loglikelihood


def test_loglikelihood_equals_direct_computation(loaded):
    model, tokenizer = loaded
    results = adapter(loaded, batch_size=1).loglikelihood(requests("loglikelihood", PAIRS), disable_tqdm=True)
    assert len(results) == len(PAIRS)
    for (context, continuation), (logprob, greedy) in zip(PAIRS, results):
        expected, expected_greedy = direct_loglikelihood(model, tokenizer, context, continuation)
        assert logprob == pytest.approx(expected, abs=1e-5), (context, continuation)
        assert greedy == expected_greedy
    assert results[-1] == (0.0, True)
    assert all(logprob < 0 for logprob, _ in results[:-1])


@pytest.mark.parametrize(("batch_size", "segment_length"), [(4, 2048), (3, 7), (8, 2)])
def test_loglikelihood_batched_and_segmented_equal_unbatched(loaded, batch_size, segment_length):
    """Right-padded batches and short segments with the state carried change nothing."""
    pairs = PAIRS + [(context + " and more", continuation) for context, continuation in PAIRS[:3]] + PAIRS[:2]
    alone = adapter(loaded, batch_size=1).loglikelihood(requests("loglikelihood", pairs), disable_tqdm=True)
    batched = adapter(loaded, batch_size=batch_size, segment_length=segment_length).loglikelihood(
        requests("loglikelihood", pairs), disable_tqdm=True)
    for (a, greedy_a), (b, greedy_b) in zip(alone, batched):
        assert b == pytest.approx(a, abs=1e-5)
        assert greedy_a == greedy_b


def test_greedy_flag_is_true_for_the_models_own_continuation(loaded):
    model, tokenizer = loaded
    context = "Once upon a time"
    ids = torch.tensor([tokenizer.encode(context)])
    with torch.no_grad():
        output = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    tokens = output[0, ids.shape[1]:].tolist()
    lm = adapter(loaded)
    (logprob, greedy), = lm._loglikelihood_tokens([((context, ""), ids[0].tolist(), tokens)])
    assert greedy and logprob < 0
    (_, greedy), = lm._loglikelihood_tokens([((context, ""), ids[0].tolist(), tokens[:-1] + [(tokens[-1] + 1) % 256])])
    assert not greedy


class MergingTokenizer:
    """Greedy longest match over a vocabulary where "ab" is one token: the context "xa" and the continuation "b"
    merge across their border."""

    vocab = {"ab": 0, "a": 1, "b": 2, "x": 3, " ": 4, "<eos>": 5}
    bos_token_id = None
    eos_token_id = 5

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        tokens, i = [], 0
        while i < len(text):
            piece = text[i : i + 2] if text[i : i + 2] in self.vocab else text[i]
            tokens.append(self.vocab[piece])
            i += len(piece)
        return tokens


@pytest.mark.parametrize(("context", "continuation", "expected"), [
    ("xa", "x", ([3, 1], [3])),  # no merge: the context's own tokens, then the continuation's
    ("xa", "b", ([3], [0])),  # "a" + "b" merge into one token: it is scored (there is no other)
    ("x a", "bx", ([3, 4], [0, 3])),  # context "x", " ", "a"; whole "x", " ", "ab", "x": "ab" is scored, not lost
    ("x ", "a", ([3], [4, 1])),  # the trailing space moves into the continuation
    ("  ", "ab", ([5], [4, 4, 0])),  # nothing left of the context: EOS (the tokenizer has no BOS) stands for it
])
def test_encode_pair_splits_the_whole_tokenization(context, continuation, expected):
    lm = PalimpsaLM.__new__(PalimpsaLM)  # only the tokenizer is needed
    lm.tokenizer, lm._eot = MergingTokenizer(), MergingTokenizer.eos_token_id
    assert lm._encode_pair(context, continuation) == expected


def test_beta_scale_argument_is_applied(model_dir):
    pair = requests("loglikelihood", [PAIRS[0]])
    plain = PalimpsaLM(str(model_dir), device="cpu", beta_scale=0.0)
    scaled = PalimpsaLM(str(model_dir), device="cpu", beta_scale=BETA_SCALE)
    assert plain.model.config.beta_scale == 0.0
    assert all(m.beta_scale == BETA_SCALE for m in scaled.model.palimpsa_mixers())
    assert abs(plain.loglikelihood(pair, disable_tqdm=True)[0][0]
               - scaled.loglikelihood(pair, disable_tqdm=True)[0][0]) > 1e-3


# ----------------------------------------------------------------------------------------------------------------
# loglikelihood_rolling


@pytest.mark.parametrize(("batch_size", "segment_length"), [(1, 2048), (3, 16), (2, 5)])
def test_loglikelihood_rolling_equals_full_forward(loaded, batch_size, segment_length):
    model, tokenizer = loaded
    lm = adapter(loaded, batch_size=batch_size, segment_length=segment_length)
    results = lm.loglikelihood_rolling(requests("loglikelihood_rolling", TEXTS), disable_tqdm=True)
    assert all(isinstance(value, float) for value in results)
    for text, value in zip(TEXTS, results):
        assert value == pytest.approx(direct_rolling(model, tokenizer, text), rel=1e-6, abs=1e-4), text
    assert results[2] == 0.0
    ids = torch.tensor([tokenizer.eos_token_id] + tokenizer.encode(TEXTS[0]))
    assert -results[0] == pytest.approx(nll_by_position(model, ids, 32).sum().item(), rel=1e-6, abs=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# generate_until


PROMPTS = ["Q: What is the capital of France?\nA:", "hi", "Count: one, two, three,", "The alphabet starts with a"]


def ascii_stop(model, tokenizer, prompt: str) -> str:
    """A character that greedy decoding of ``prompt`` produces a few characters in (so the cut is exercised)."""
    text = direct_generate(model, tokenizer, prompt, [], 12)
    for char in text[2:]:
        if char.isascii():
            return char
    pytest.fail(f"no ASCII character in the greedy continuation of {prompt!r}: {text!r}")


@pytest.mark.parametrize("batch_size", [1, 4])
def test_generate_until_equals_greedy_generate_cut_at_the_stop_string(loaded, batch_size):
    model, tokenizer = loaded
    stops = {prompt: ascii_stop(model, tokenizer, prompt) for prompt in PROMPTS}
    arguments = [(prompt, {"until": [stops[prompt], "never appears"], "max_gen_toks": 12, "do_sample": False})
                 for prompt in PROMPTS]
    arguments.append((PROMPTS[1], {"until": [], "max_new_tokens": 5}))  # no stop: max_new_tokens alias caps it
    results = adapter(loaded, batch_size=batch_size).generate_until(requests("generate_until", arguments),
                                                                    disable_tqdm=True)
    for (prompt, kwargs), text in zip(arguments, results):
        limit = kwargs.get("max_gen_toks", kwargs.get("max_new_tokens"))
        expected = direct_generate(model, tokenizer, prompt, kwargs["until"], limit)
        assert text == expected, (prompt, text, expected)
        assert not any(stop in text for stop in kwargs["until"])
    assert len(results[-1]) <= 5  # a byte token decodes to at most one character
    assert any(len(text) for text in results)


# ----------------------------------------------------------------------------------------------------------------
# registration and lm_eval end to end


def test_registered_with_lm_eval_and_model_args_win(model_dir):
    from lm_eval.api.registry import get_model

    cls = get_model("palimpsa")
    assert cls is PalimpsaLM
    lm = cls.create_from_arg_string(f"pretrained={model_dir},device=cpu,dtype=float32,batch_size=4,beta_scale=0.5",
                                    {"batch_size": 1, "max_batch_size": None, "device": None})
    assert lm.batch_size == 4 and lm.model.config.beta_scale == 0.5 and lm.model.dtype == torch.float32
    assert get_model("hf") is not None  # lm_eval's own models stay available


def test_simple_evaluate_on_local_tasks(model_dir):
    from lm_eval.tasks import TaskManager

    output = lm_eval.simple_evaluate(
        model="palimpsa", model_args=f"pretrained={model_dir},device=cpu,dtype=float32,batch_size=4,beta_scale=1.0",
        tasks=["palimpsa_tiny"], task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
        bootstrap_iters=0,
        log_samples=False)
    results = output["results"]
    expected = {"palimpsa_tiny_mc": ["acc", "acc_norm"], "palimpsa_tiny_cloze": ["acc", "perplexity"],
                "palimpsa_tiny_gen": ["exact_match"],
                "palimpsa_tiny_ppl": ["word_perplexity", "byte_perplexity", "bits_per_byte"]}
    for task, metrics in expected.items():
        for metric in metrics:
            value = results[task][f"{metric},none"]
            assert isinstance(value, (int, float)) and math.isfinite(value), (task, metric, value)
    assert 0.0 <= results["palimpsa_tiny_mc"]["acc,none"] <= 1.0
    assert results["palimpsa_tiny_ppl"]["bits_per_byte,none"] > 0


def test_command_line_runs_a_local_task(model_dir, tmp_path, monkeypatch):
    """The documented command: ``palimpsa-lm-eval run --model palimpsa ...`` (run in-process here, through the
    console script's ``main``, to spare a second start of Python and torch)."""
    from palimpsa.upgrade.cli import palimpsa_lm_eval

    monkeypatch.setattr(sys, "argv", [
        "palimpsa-lm-eval", "run", "--model", "palimpsa", "--model_args",
        f"pretrained={model_dir},device=cpu,dtype=float32,batch_size=4,beta_scale=1.0", "--tasks", "palimpsa_tiny_mc",
        "--include_path", str(TASKS), "--limit", "2", "--output_path", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_info:  # as the console script exits: 0, or 2 with a one-line error
        palimpsa_lm_eval.main()
    assert exit_info.value.code == 0
    [result_file] = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(result_file.read_text())["results"]["palimpsa_tiny_mc"]
    assert 0.0 <= results["acc,none"] <= 1.0


# what lm-eval's plugin discovery does with an installed package's `lm_eval.models` entry points, before its CLI runs
DISCOVERY = """
import importlib.metadata
import lm_eval.models
from lm_eval.api.registry import model_registry
for entry in importlib.metadata.entry_points(group="lm_eval.models"):
    if entry.name not in model_registry:
        model_registry.register(entry.name, target=entry)
from lm_eval.__main__ import cli_evaluate
cli_evaluate()
"""


def test_lm_eval_finds_the_model_through_its_entry_point(model_dir, tmp_path):
    """``lm_eval run --model palimpsa`` with nothing of palimpsa imported first: the package declares an
    ``lm_eval.models`` entry point, and lm-eval registers those as lazy placeholders (its plugin discovery, in the
    releases after 0.4.13). Where the installed lm-eval discovers them, its own ``lm_eval`` command runs; 0.4.13
    reads no entry points, so there the same discovery step runs before lm-eval's command-line entry."""
    import subprocess

    from lm_eval.api import registry

    arguments = ["run", "--model", "palimpsa", "--model_args",
                 f"pretrained={model_dir},device=cpu,dtype=float32,batch_size=4", "--tasks", "palimpsa_tiny_mc",
                 "--include_path", str(TASKS), "--limit", "2", "--output_path", str(tmp_path / "out")]
    lm_eval_command = ([str(Path(sys.executable).parent / "lm_eval")] if hasattr(registry, "load_plugins")
                       else [sys.executable, "-c", DISCOVERY])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(lm_eval_command + arguments, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    [result_file] = (tmp_path / "out").rglob("results_*.json")
    output = json.loads(result_file.read_text())
    assert output["config"]["model"] == "palimpsa"
    assert 0.0 <= output["results"]["palimpsa_tiny_mc"]["acc,none"] <= 1.0


# ----------------------------------------------------------------------------------------------------------------
# without lm_eval


def test_module_imports_without_lm_eval(monkeypatch):
    for name in [name for name in sys.modules if name == "lm_eval" or name.startswith("lm_eval.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval...` now raises ImportError
    module = load_without_lm_eval("palimpsa.upgrade.evaluate._lm_eval_adapter_without_lm_eval", ADAPTER)
    assert module._IMPORT_ERROR is not None
    with pytest.raises(ImportError, match="pip install lm-eval"):
        module.register()
    with pytest.raises(ImportError, match="pip install lm-eval"):
        module.PalimpsaLM("anything")
    command = load_without_lm_eval("palimpsa.upgrade.cli._palimpsa_lm_eval_without_lm_eval", COMMAND)
    with pytest.raises(SystemExit, match="pip install lm-eval"):
        command.main()


def load_without_lm_eval(name: str, path: Path):
    """The module at ``path``, executed afresh as ``name`` (while ``lm_eval`` cannot be imported)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lm_eval_hf_model_runs_an_upgraded_model_as_remote_code(model_dir, tmp_path):
    """The path that works with any lm-eval, 0.4.13 included: lm-eval's own ``hf`` model loads the directory through
    ``AutoModelForCausalLM`` with ``trust_remote_code=True`` (the ``auto_map`` and modeling code every model
    directory carries), run as a user runs it: the ``lm_eval`` console script."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lm_eval"), "run", "--model", "hf", "--model_args",
         f"pretrained={model_dir},trust_remote_code=True,dtype=float32", "--device", "cpu", "--tasks",
         "palimpsa_tiny_mc", "--include_path", str(TASKS), "--limit", "2", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    [result_file] = (tmp_path / "out").rglob("results_*.json")
    output = json.loads(result_file.read_text())
    assert output["config"]["model"] == "hf"
    assert 0.0 <= output["results"]["palimpsa_tiny_mc"]["acc,none"] <= 1.0
