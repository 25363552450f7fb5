"""What docs/guarantees.md promises, tested one class at a time: bad input (numbers, paths, config fields, weights),
verification, manifests, staging directories, interruption and resume.

A representative case of each class runs its console script as a user does: a subprocess, its exit status, the
last line of its stderr, no traceback, and what is on disk afterwards. Those runs start together in one module
fixture (each spends seconds importing torch). The other cases of a class go through the same entry point
(``upgrade_main``, ``export_main``...) in this process, which differs only in not starting a Python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from checkpoints import EMBEDDED, ROOT, TEST_DATA, write_mamba_ssm, write_transformers
from palimpsa.upgrade import PalimpsaError, PalimpsaForCausalLM, upgrade_model
from palimpsa.upgrade.cli.eval_model import main as eval_main
from palimpsa.upgrade.cli.export_model import main as export_main
from palimpsa.upgrade.cli.finetune_model import main as finetune_main
from palimpsa.upgrade.cli.generate_text import main as generate_main
from palimpsa.upgrade.cli.upgrade_model import main as upgrade_main
from palimpsa.upgrade.cli.verify_equivalence import main as verify_main
from palimpsa.upgrade.convert.checkpoint import load_checkpoint
from palimpsa.upgrade.evaluate.generation import generate_text
from palimpsa.upgrade.export.export import export_model
from safetensors.torch import load_file, save_file

RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
LM_EVAL_TASKS = TEST_DATA / "lm_eval_task"
BIN = Path(sys.executable).parent  # the console scripts installed with the Python that runs the tests
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
ENV.pop("TRITON_INTERPRET", None)  # conftest sets it for the kernel tests; a user's shell does not
NAN_WEIGHT = "backbone.layers.1.mixer.out_proj.weight"


def script(name: str) -> str:
    return str(BIN / name) if (BIN / name).is_file() else name


def fast_training(model: Path, output: Path) -> list[str]:
    """Recipe overrides for a few-second run of the tiny recipe on ``model``."""
    return ["data.seq_len=64", "data.batch_size=2", "eval.every=0", "eval.passkey_samples=0", "eval.batches=1",
            "schedule.warmup_steps=1", "train.log_every=1", "logging.tensorboard=false", "trainable.mode=beta",
            f"model.path={model}", f"output_dir={output}"]


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones included) with its bytes; None for a directory."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def last_line(stderr: str) -> str:
    return [line for line in stderr.replace("\r", "\n").split("\n") if line.strip()][-1]


def assert_one_line_error(code: int, stdout: str, stderr: str, prog: str, match: str) -> None:
    """Exit status 2, no traceback, and stderr ending in one ``PROG: error:`` line that matches ``match``."""
    assert code == 2, stderr[-2000:]
    assert "Traceback" not in stdout + stderr, stderr[-2000:]
    assert stderr.count(f"{prog}: error:") == 1, stderr[-2000:]
    line = last_line(stderr)
    assert line.startswith(f"{prog}: error: "), stderr[-2000:]
    assert re.search(match, line), line


def run_main(main, prog: str, argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """A console script's entry point in this process: its exit status, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def edit_config(directory: Path, change) -> Path:
    raw = json.loads((directory / "config.json").read_text())
    change(raw)
    (directory / "config.json").write_text(json.dumps(raw))
    return directory


def flip_byte(path: Path, offset_from_end: int = 5000) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


def with_weight(source: Path, directory: Path, name: str, change) -> Path:
    """A copy of the pickled checkpoint ``source`` whose weight ``name`` is replaced by ``change(weight)``."""
    shutil.copytree(source, directory)
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    state[name] = change(state[name])
    torch.save(state, directory / "pytorch_model.bin")
    return directory


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory, tiny_random) -> Path:
    """The random tiny model with two Palimpsa layers, as upgrade-model writes it."""
    output = tmp_path_factory.mktemp("upgraded") / "model"
    upgrade_model(tiny_random, 2, output=output, verify=False)
    return output


# ------------------------------------------------------------------------------------------ console-script runs


def kill_while_writing(root: Path, source: Path) -> tuple[list[str], subprocess.CompletedProcess]:
    """SIGKILL upgrade-model while it writes its output (its weight writer made to wait, in the same entry point a
    user runs), then run upgrade-model again to the same output. Returns what the killed run left and the rerun."""
    waiting = ("import sys, time\nimport palimpsa.upgrade.io.model_directory as model_directory\n"
               "def wait(*args, **kwargs):\n    time.sleep(600)\n"
               "model_directory.save_state_dict_sharded = wait\nfrom palimpsa.upgrade.cli.upgrade_model import main\n"
               "sys.argv[0] = 'upgrade-model'\nmain()\n")
    args = [str(source), "--layers", "2", "--skip-verify", "-q", "-o", str(root / "out")]
    process = subprocess.Popen([sys.executable, "-c", waiting, *args], cwd=root, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(root.glob(".out.partial-*")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    left = sorted(p.name for p in root.iterdir())
    return left, subprocess.run([script("upgrade-model"), *args], cwd=root, env=ENV, capture_output=True, text=True,
                                timeout=300)


def interrupt_training(root: Path, model: Path) -> subprocess.CompletedProcess:
    """Ctrl-C (SIGINT) to finetune-model once its second checkpoint is written."""
    args = [str(RECIPE), *fast_training(model, root / "run"), "train.max_steps=5000", "checkpoint.every=2"]
    # as from a terminal: SIGINT delivered and handled by default, whatever an earlier test left in this process's
    # signal mask (which a child inherits across exec)
    command = [sys.executable, "-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, "
               "[signal.SIGINT]); signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
               script("finetune-model"), *args]
    process = subprocess.Popen(command, cwd=root, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not (root / "run" / "checkpoints" / "step-0000004").is_dir() and time.time() < deadline \
            and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def unprivileged() -> list[str]:
    """A prefix that runs a command without root's power to write anywhere (as root, permission bits do not
    apply): setpriv drops the capabilities that override them."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only directory cannot be made")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_random, upgraded) -> dict:
    root = tmp_path_factory.mktemp("runs")
    for name in ("nan", "unwritable", "flipped", "empty_prompt", "killed", "interrupted"):
        (root / name).mkdir()

    nan_source = write_mamba_ssm(root / "sources" / "nan", n_layer=3, safetensors=True)
    weights = load_file(str(nan_source / "model.safetensors"))
    weights[NAN_WEIGHT][0, 0] = float("nan")
    save_file(weights, str(nan_source / "model.safetensors"), metadata={"format": "pt"})
    flipped = shutil.copytree(EMBEDDED, root / "sources" / "flipped")
    flip_byte(flipped / "pytorch_model.bin")
    read_only = root / "unwritable" / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)

    upgrade, generate = script("upgrade-model"), script("generate-text")
    commands = {
        "nan": [upgrade, str(nan_source), "--layers", "2", "-o", "out"],
        "unwritable": [*unprivileged(), upgrade, str(tiny_random), "--layers", "2", "-o", str(read_only / "out")],
        "flipped": [upgrade, str(flipped), "--layers", "2", "-o", "out"],
        "empty_prompt": [generate, str(upgraded), "-p", "", "--max-new-tokens", "6"],
    }
    before = {name: snapshot(root / name) for name in commands}
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(subprocess.run, command, cwd=root / name, env=ENV, capture_output=True,
                                     text=True, timeout=300) for name, command in commands.items()}
        futures["killed"] = pool.submit(kill_while_writing, root / "killed", tiny_random)
        futures["interrupted"] = pool.submit(interrupt_training, root / "interrupted", tiny_random)
        results = {name: future.result() for name, future in futures.items()}
    read_only.chmod(0o755)
    return {"root": root, "before": before, **results}


def assert_script_refused(runs: dict, name: str, prog: str, match: str) -> None:
    result = runs[name]
    assert_one_line_error(result.returncode, result.stdout, result.stderr, prog, match)
    assert snapshot(runs["root"] / name) == runs["before"][name]  # nothing written, nothing removed


def test_a_nan_weight_is_refused_at_load(runs):
    """The issue's most serious case: one NaN in a weight made verification print `nan` and pass."""
    assert_script_refused(runs, "nan", "upgrade-model", rf"weight {re.escape(NAN_WEIGHT)} holds 1 NaN or infinite")
    assert "beta scale 0" not in runs["nan"].stdout  # stopped while reading, before any verification


def test_an_output_that_cannot_be_written_is_refused_before_loading(runs):
    assert_script_refused(runs, "unwritable", "upgrade-model", r"read-only is not writable by this user")
    assert "Plan" not in runs["unwritable"].stdout and "reading weights" not in runs["unwritable"].stderr


def test_a_flipped_byte_in_the_source_is_caught_by_its_manifest(runs):
    assert_script_refused(runs, "flipped", "upgrade-model",
                          r"pytorch_model\.bin does not match its sha256 in export_report\.json")


def test_an_empty_prompt_generates_from_bos(runs, upgraded):
    result = runs["empty_prompt"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    # the tiny tokenizer's BOS is <|endoftext|>: an empty prompt continues exactly what that token alone does
    expected = generate_text(upgraded, ["<|endoftext|>"], max_new_tokens=6)
    assert generate_text(upgraded, [""], max_new_tokens=6) == expected
    assert result.stdout == (expected[0] + "\n").replace("\r\n", "\n").replace("\r", "\n")  # text mode


def test_a_killed_run_leaves_staging_that_the_next_run_removes(runs):
    left, rerun = runs["killed"]
    assert len(left) == 1 and re.fullmatch(r"\.out\.partial-\d+", left[0]), left  # SIGKILL cannot be caught
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sorted(p.name for p in (runs["root"] / "killed").iterdir()) == ["out"]
    assert json.loads((runs["root"] / "killed" / "out" / "config.json").read_text())["upgraded_layers"] == [1, 3]


def test_ctrl_c_during_finetuning_says_what_was_written_and_how_to_resume(runs):
    result, run = runs["interrupted"], runs["root"] / "interrupted" / "run"
    assert result.returncode == 130, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    line = last_line(result.stderr)
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert checkpoints[-1] >= "step-0000004" and not any(name.endswith(".partial") for name in checkpoints)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "metrics.jsonl", "recipe.yaml"]
    assert line.startswith(f"finetune-model: interrupted; {run} holds checkpoints/, metrics.jsonl, recipe.yaml; "
                           f"the last complete checkpoint is {run / 'checkpoints' / checkpoints[-1]}; resume with: "
                           f"finetune-model {RECIPE} "), line
    assert line.endswith(f"output_dir={run} train.max_steps=5000 checkpoint.every=2 --resume"), line
    assert "nothing was written" not in result.stderr


# ------------------------------------------------------------------------- numbers: type, finiteness, range


NUMBERS = [  # (entry point, program, arguments after the model, what the error line says)
    (upgrade_main, "upgrade-model", ["--layers", "2", "--beta-init", "nan"],
     r"--beta-init must be a finite number > 0, got 'nan'"),
    (upgrade_main, "upgrade-model", ["--layers", "2", "--max-kl", "inf"], r"--max-kl must be a finite number"),
    (upgrade_main, "upgrade-model", ["--layers", "2", "--beta-rank", "1.5"], r"--beta-rank must be an integer >= 1"),
    (upgrade_main, "upgrade-model", ["--layers", "2", "--seed", "-1"], r"--seed must be an integer from 0 to"),
    (export_main, "export-model", ["--shard-size", "0MB"], r"size '0MB' must be positive"),
    (generate_main, "generate-text", ["-p", "a", "--temperature", "1", "--top-k", "-3"],
     r"--top-k must be an integer >= 1, got '-3'"),
    (generate_main, "generate-text", ["-p", "a", "--temperature", "1", "--top-p", "2"],
     r"--top-p must be a finite number in \(0, 1\], got '2'"),
    (generate_main, "generate-text", ["-p", "a", "--temperature", "-1"],
     r"--temperature must be a finite number >= 0, got '-1'"),
    (generate_main, "generate-text", ["-p", "a", "--max-new-tokens", "1000000000"],
     r"--max-new-tokens must be an integer from 1 to 1048576"),
    (generate_main, "generate-text", ["-p", "a", "--beta-scale", "nan"], r"--beta-scale must be a finite number >= 0"),
    (generate_main, "generate-text", ["-p", "a", "--top-k", "5"], r"--top-k and --top-p apply to sampling"),
    (verify_main, "verify-equivalence", ["--decades", "400"], r"--decades must be an integer from 3 to 30"),
    (verify_main, "verify-equivalence", ["--probe-batch", "0"], r"--probe-batch must be an integer from 1 to"),
    (eval_main, "eval-model", ["--lengths", "64,inf"], r"--lengths value 'inf' must be an integer from 1 to"),
    (eval_main, "eval-model", ["--depths", "0,nan"], r"--depths value must be a finite number in \[0, 1\]"),
    (eval_main, "eval-model", ["--batch-size", "0"], r"--batch-size must be an integer from 1 to"),
    (eval_main, "eval-model", ["--device", "cuda:7"], r"--device cuda:7: this machine has \d CUDA device"),
]


@pytest.mark.parametrize("main, prog, args, match", NUMBERS, ids=[f"{p} {' '.join(a)}" for _, p, a, _ in NUMBERS])
def test_numbers_are_checked_before_any_work(main, prog, args, match, upgraded, tmp_path, monkeypatch, capsys):
    output = ["-o", str(tmp_path / "out")] if prog in ("upgrade-model", "export-model", "eval-model") else []
    code, stdout, stderr = run_main(main, prog, [str(upgraded), *args, *output], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, prog, match)
    assert "Plan" not in stdout and "Loading weights" not in stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("override, match", [
    ("optim.lr=.nan", r"optim\.lr: Input should be a finite number"),
    ("model.beta_init=.inf", r"model\.beta_init: Input should be a finite number"),
    ("train.seed=-1", r"train\.seed: Input should be greater than or equal to 0"),
    ("optim.betas=[0.9, 1.5]", r"optim\.betas\.1: Input should be less than 1"),
])
def test_recipe_numbers_are_checked_before_any_work(override, match, tiny_random, tmp_path, monkeypatch, capsys):
    args = [str(RECIPE), *fast_training(tiny_random, tmp_path / "run"), override]
    code, stdout, stderr = run_main(finetune_main, "finetune-model", args, monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, "finetune-model", match)
    assert list(tmp_path.iterdir()) == []


def test_lm_eval_model_arguments_are_checked_before_loading(tmp_path, monkeypatch, capsys):
    """Through lm_eval's command line once (it indexes its tasks first, for seconds), then the other cases of the
    class through the constructor lm_eval calls with ``--model_args``."""
    from palimpsa.upgrade.cli.palimpsa_lm_eval import main as lm_eval_main
    from palimpsa.upgrade.evaluate import lm_eval_adapter

    missing = tmp_path / "not-loaded"
    args = ["run", "--model", "palimpsa", "--model_args", f"pretrained={missing},batch_size=-1", "--tasks",
            "palimpsa_tiny_mc", "--include_path", str(LM_EVAL_TASKS), "--output_path", str(tmp_path / "out")]
    code, stdout, stderr = run_main(lm_eval_main, "palimpsa-lm-eval", args, monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, "palimpsa-lm-eval", r"palimpsa: batch_size must be an integer >= 1")
    assert list(tmp_path.iterdir()) == []
    for model_args, match in [("beta_scale=nan", r"palimpsa: beta_scale must be a finite number >= 0, got nan"),
                              ("segment_length=1.5", r"palimpsa: segment_length must be an integer >= 1, got 1\.5"),
                              ("max_gen_toks=0", r"palimpsa: max_gen_toks must be an integer >= 1, got 0"),
                              ("device=cuda:3", r"palimpsa: device cuda:3: this machine has \d CUDA device"),
                              ("dtype=int8", r"palimpsa: unknown dtype 'int8'")]:
        with pytest.raises(PalimpsaError, match=match):  # the path is never looked at: it does not exist
            lm_eval_adapter.PalimpsaLM.create_from_arg_string(f"pretrained={missing},{model_args}")


# ------------------------------------------------------------------------------------- paths: writable, overlap


def test_paths_are_checked_before_loading(tiny_random, upgraded, tmp_path, monkeypatch, capsys):
    base = shutil.copytree(tiny_random, tmp_path / "base")
    (tmp_path / "a-file").write_text("not a directory\n")
    cases = [
        (upgrade_main, "upgrade-model", [str(base), "--layers", "2", "-o", str(base), "--force"],
         r"output .*base is the source .*writing it would destroy the source, so choose an output outside it"),
        (upgrade_main, "upgrade-model", [str(base), "--layers", "2", "-o", str(base / "config.json" / "out")],
         r"cannot write output .*: .*base/config\.json is a file, not a directory"),
        (upgrade_main, "upgrade-model", [str(base), "--layers", "2", "-o", str(base / "sub"), "--force"],
         r"output .*base/sub lies inside the source"),
        (upgrade_main, "upgrade-model", [str(base), "--layers", "2", "-o", str(tmp_path), "--force"],
         r"contains the source"),
        (export_main, "export-model", [str(upgraded), "-o", str(upgraded), "--force"], r"is the source"),
        (verify_main, "verify-equivalence", [str(upgraded), "--json", str(tmp_path / "a-file" / "r.json")],
         r"cannot write --json .*: .*a-file is a file"),
        (eval_main, "eval-model", [str(upgraded), "-o", str(tmp_path / "a-file")], r"a-file is a file"),
        (finetune_main, "finetune-model", [str(RECIPE), *fast_training(base, tmp_path / "a-file" / "run")],
         r"cannot write output_dir .*a-file is a file"),
    ]
    before, upgraded_before = snapshot(tmp_path), snapshot(upgraded)
    for main, prog, args, match in cases:
        code, stdout, stderr = run_main(main, prog, args, monkeypatch, capsys)
        assert_one_line_error(code, stdout, stderr, prog, match)
        assert "Plan" not in stdout and "reading weights" not in stderr, prog
    assert snapshot(tmp_path) == before and snapshot(upgraded) == upgraded_before


# ------------------------------------------------------------------------------------------------ config fields


@pytest.mark.parametrize("make, match", [
    (lambda d: edit_config(write_transformers(d), lambda raw: raw.pop("num_heads")),
     r"config\.json has no num_heads, which this format needs"),
    (lambda d: edit_config(write_mamba_ssm(d), lambda raw: raw.update(d_model=-256)),
     r"config\.json's d_model must be an integer >= 1, got -256"),
    (lambda d: edit_config(write_mamba_ssm(d), lambda raw: raw["ssm_cfg"].update(headdim=0)),
     r"config\.json's ssm_cfg\.headdim must be an integer >= 1, got 0"),
    (lambda d: edit_config(write_mamba_ssm(d), lambda raw: raw["ssm_cfg"].update(d_state=8.5)),
     r"config\.json's ssm_cfg\.d_state must be an integer >= 1, got 8\.5"),
    (lambda d: edit_config(write_mamba_ssm(d), lambda raw: raw.update(norm_epsilon=float("nan"))),
     r"config\.json's norm_epsilon must be a finite number > 0, got nan"),
    (lambda d: edit_config(write_mamba_ssm(d), lambda raw: raw["ssm_cfg"].update(bias="yes")),
     r"config\.json's ssm_cfg\.bias must be true or false, got 'yes'"),
    (lambda d: edit_config(write_transformers(d), lambda raw: raw.update(time_step_limit=[0.1, float("nan")])),
     r"step-size limit .* must be \[min, max\] with 0 <= min < max"),
])
def test_config_fields_are_checked(make, match, tmp_path):
    with pytest.raises(PalimpsaError, match=match):
        load_checkpoint(make(tmp_path / "checkpoint"))


def test_a_palimpsa_config_with_a_bad_size_is_refused(upgraded, tmp_path, monkeypatch, capsys):
    model = edit_config(shutil.copytree(upgraded, tmp_path / "model"), lambda raw: raw.update(headdim=0))
    code, stdout, stderr = run_main(generate_main, "generate-text", [str(model), "-p", "a"], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, "generate-text", r"headdim must be a positive integer, got 0")


# ------------------------------------------------------------------------------------ weights: floating, finite


def test_weights_must_be_floating_and_finite(tiny_random, upgraded, tmp_path, monkeypatch, capsys):
    int32 = with_weight(tiny_random, tmp_path / "int32", "backbone.norm_f.weight", lambda t: t.to(torch.int32))
    infinite = with_weight(tiny_random, tmp_path / "inf", NAN_WEIGHT,
                           lambda t: t.index_fill(0, torch.tensor([2]), float("inf")))
    large = with_weight(tiny_random, tmp_path / "large", "backbone.embedding.weight", lambda t: t * 1e6)
    palimpsa = shutil.copytree(upgraded, tmp_path / "palimpsa")
    model = PalimpsaForCausalLM.from_pretrained(str(palimpsa))
    with torch.no_grad():
        model.backbone.layers[1].mixer.out_proj.weight[3, 3] = float("nan")
    model.save_pretrained(str(palimpsa))  # rewrites the manifest: the NaN is found by the weight check
    cases = [
        (upgrade_main, "upgrade-model", [str(int32), "--layers", "2"],
         r"weight backbone\.norm_f\.weight is stored as int32; model weights must be floating point"),
        (upgrade_main, "upgrade-model", [str(infinite), "--layers", "2"],
         rf"weight {re.escape(NAN_WEIGHT)} holds \d+ NaN or infinite value\(s\)"),
        (upgrade_main, "upgrade-model", [str(large), "--layers", "2", "--dtype", "float16"],
         r"weight backbone\.embedding\.weight exceeds the range of float16; choose --dtype bfloat16 or float32"),
        (generate_main, "generate-text", [str(palimpsa), "-p", "a"],
         rf"weight {re.escape(NAN_WEIGHT)} holds 1 NaN or infinite value\(s\)"),
    ]
    for main, prog, args, match in cases:
        output = ["-o", str(tmp_path / "out")] if prog == "upgrade-model" else []
        code, stdout, stderr = run_main(main, prog, [*args, *output], monkeypatch, capsys)
        assert_one_line_error(code, stdout, stderr, prog, match)
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


# ---------------------------------------------------------------------------------------- verification and NaN


def test_verification_fails_on_nan_logits(tiny_random, tmp_path, monkeypatch):
    """`diff > tolerance` is false for NaN: the comparison must be written so that NaN fails it."""
    from palimpsa.upgrade.convert import upgrade

    original, calls = upgrade.probe_logits, []

    def nan_after_conversion(model, probe):
        calls.append(1)
        logits = original(model, probe)
        return logits if len(calls) == 1 else torch.full_like(logits, float("nan"))

    monkeypatch.setattr(upgrade, "probe_logits", nan_after_conversion)
    with pytest.raises(PalimpsaError, match=r"verification failed: with beta scale 0 the logits differ .* nan"):
        upgrade_model(tiny_random, 2, output=tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------- staging and interruption


def dead_pid() -> int:
    """The PID of a process that has exited (the system does not reuse PIDs at once)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_interrupted_and_stale_staging_are_removed(upgraded, tmp_path, monkeypatch, capsys):
    from palimpsa.upgrade.io import model_directory

    stale = tmp_path / f".out.partial-{dead_pid()}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half a model")
    live = tmp_path / ".out.partial-1"  # PID 1 is alive: another run writing the same output now
    live.mkdir()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(model_directory, "save_state_dict_sharded", interrupted)
    code, _, stderr = run_main(export_main, "export-model", [str(upgraded), "-o", str(tmp_path / "out")],
                               monkeypatch, capsys)
    assert code == 130 and last_line(stderr) == "export-model: interrupted; nothing was written"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial-1"]  # its own staging went too
    monkeypatch.undo()
    export_model(upgraded, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial-1", "out"]
    assert (tmp_path / "out" / "export_report.json").is_file()


def test_a_replaced_output_moved_aside_by_a_killed_run_comes_back(upgraded, tmp_path):
    """Killed between moving the old output aside and renaming the new one in: the next run puts it back."""
    previous = shutil.copytree(upgraded, tmp_path / f".out.old-{dead_pid()}")
    with pytest.raises(PalimpsaError, match="is not empty; choose another or pass --force"):
        export_model(upgraded, tmp_path / "out", standalone=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert snapshot(tmp_path / "out") == snapshot(upgraded) and not previous.exists()


# ------------------------------------------------------------------------------------------------------ resume


def train(args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    code, _, stderr = run_main(finetune_main, "finetune-model", args, monkeypatch, capsys)
    return code, stderr


def test_resume_falls_back_from_a_broken_checkpoint(tiny_random, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    args = [str(RECIPE), *fast_training(tiny_random, run), "train.max_steps=6", "checkpoint.every=2",
            "checkpoint.keep=3"]
    code, stderr = train(args, monkeypatch, capsys)
    assert code == 0, stderr[-2000:]
    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-0000002", "step-0000004", "step-0000006"]
    manifest = json.loads((checkpoints / "step-0000006" / "trainer_state.json").read_text())["files"]
    assert "state/model.safetensors" in manifest and "state/random_states_0.pkl" in manifest

    newest = checkpoints / "step-0000006" / "state" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    legacy = checkpoints / "step-0000004"  # a checkpoint without a manifest, whose RNG state does not load
    state = json.loads((legacy / "trainer_state.json").read_text())
    del state["files"]
    (legacy / "trainer_state.json").write_text(json.dumps(state))
    (legacy / "state" / "random_states_0.pkl").write_bytes(b"not a pickle")
    (checkpoints / "step-0000099.partial").mkdir()  # left by a killed run
    (run / "final.partial").mkdir()

    code, stderr = train([*args, "train.max_steps=8", "--resume"], monkeypatch, capsys)
    assert code == 0, stderr[-2000:]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, stderr[-3000:]
    assert re.search(r"cannot resume from .*step-0000006 \(.*state/model\.safetensors has 1000 bytes, "
                     r"trainer_state\.json says \d+; the file is truncated", warnings[0]), warnings[0]
    assert re.search(r"cannot resume from .*step-0000004 \(cannot load the RNG state .*random_states_0\.pkl",
                     warnings[1]), warnings[1]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == [1, 2, 3, 4, 5, 6, 7, 8]  # resumed at step 2
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-0000004", "step-0000006", "step-0000008"]
    assert not (run / "final.partial").exists() and (run / "final" / "config.json").is_file()

    for checkpoint in checkpoints.iterdir():
        (checkpoint / "state" / "model.safetensors").write_bytes(b"")
    code, stderr = train([*args, "train.max_steps=9", "--resume"], monkeypatch, capsys)
    assert_one_line_error(code, "", stderr, "finetune-model", r"--resume: no checkpoint under .* loads \(step-0000008")
