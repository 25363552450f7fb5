"""Fine-tuning: recipe validation, trainable selection, the tiny run, NaN guard, and resume after SIGKILL."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from checkpoints import EMBEDDED, ROOT
from palimpsa.upgrade.errors import PalimpsaError
from palimpsa.upgrade.train.recipe import load_recipe

TINY = ROOT / "recipes" / "tiny-cpu.yaml"
# Small and fast: 64-token rows, no passkey probe, deterministic single-threaded subprocesses.
FAST = ["data.seq_len=64", "data.batch_size=2", "eval.passkey_samples=0", "eval.batches=1",
        "schedule.warmup_steps=1", "logging.tensorboard=false", f"model.path={EMBEDDED}"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
ENV.pop("TRITON_INTERPRET", None)


def fast(model: Path) -> list[str]:
    """FAST on another model: the random tiny test model (``tiny_random``) serves the runs that exercise the
    trainer's machinery (checkpoints, resume, NaN guard, data parallelism), which need no pretrained model."""
    return [item for item in FAST if not item.startswith("model.path=")] + [f"model.path={model}"]


def run_together(*commands: tuple[list[str], dict]) -> list[subprocess.CompletedProcess]:
    """Independent runs (command, environment) at the same time: each spends seconds importing torch."""
    with ThreadPoolExecutor(len(commands)) as pool:
        futures = [pool.submit(subprocess.run, command, capture_output=True, text=True, env=env)
                   for command, env in commands]
        return [future.result() for future in futures]


def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


# --- recipe validation -------------------------------------------------------------------------------------------

def test_shipped_recipes_validate():
    names = sorted(p.name for p in (ROOT / "recipes").glob("*.yaml"))
    assert {"tiny-cpu.yaml", "beta-only.yaml", "beta-lora.yaml", "upgraded-full.yaml",
            "mamba2-2.7b-8layers-16k.yaml", "mamba2-2.7b-8layers-16k-fsdp.yaml"} <= set(names)
    modes = {name: load_recipe(ROOT / "recipes" / name).trainable.mode for name in names}
    assert modes["beta-only.yaml"] == "beta" and modes["beta-lora.yaml"] == "beta+lora"
    assert modes["upgraded-full.yaml"] == "upgraded"
    big = load_recipe(ROOT / "recipes" / "mamba2-2.7b-8layers-16k.yaml")
    assert big.data.seq_len == 16384 and big.model.upgrade_layers == "8"


@pytest.mark.parametrize("override, expected", [
    ("data.batch_sise=2", "unknown key data.batch_sise; did you mean data.batch_size?"),
    ("optim.learning_rate=1", "unknown key optim.learning_rate"),
    ("trainabel.mode=beta", "unknown key trainabel; did you mean trainable?"),
    ("optim.lr=2", "optim.lr: Input should be less than or equal to 1"),
    ("train.max_steps=0", "train.max_steps: Input should be greater than or equal to 1"),
    ("trainable.mode=everything", "trainable.mode: Input should be"),
    ("schedule.warmup_steps=500", "schedule.warmup_steps (500) must be below train.max_steps"),
    ("data.path=./x", "give data.path (one local source) or data.sources, not both"),
    ("data.state_passing=true", "gradient_checkpointing cannot be combined with data.state_passing"),
])
def test_recipe_errors_name_the_problem(override, expected):
    overrides = [override] if override != "data.state_passing=true" else [override,
                                                                         "model.gradient_checkpointing=true"]
    with pytest.raises(PalimpsaError) as error:
        load_recipe(TINY, overrides)
    assert expected in str(error.value)


def test_recipe_lists_every_problem_and_overrides_are_typed(tmp_path):
    path = write_recipe(tmp_path, "output_dir: x\nmodel: {path: m, upgrade_layer: 2}\ndata: {path: d}\n"
                                  "train: {max_steps: 10, grad_acum: 2}\n")
    with pytest.raises(PalimpsaError) as error:
        load_recipe(path)
    message = str(error.value)
    assert "model.upgrade_layer; did you mean model.upgrade_layers?" in message
    assert "train.grad_acum; did you mean train.grad_accum?" in message
    recipe = load_recipe(TINY, ["train.max_steps=7", "optim.lr=5e-4", "lora.target_modules=[in_proj]",
                                "logging.tensorboard=false"])
    assert recipe.train.max_steps == 7 and recipe.optim.lr == 5e-4 and recipe.lora.target_modules == ["in_proj"]
    assert recipe.logging.tensorboard is False
    with pytest.raises(PalimpsaError, match="write key=value"):
        load_recipe(TINY, ["train.max_steps"])
    with pytest.raises(PalimpsaError, match="does not exist"):
        load_recipe(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed")
    with pytest.raises(PalimpsaError, match="not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")


def test_a_five_step_smoke_run_works_in_one_try_from_any_directory(tmp_path):
    """``finetune-model recipes/tiny-cpu.yaml train.max_steps=5`` from another working directory: the recipe's
    model.path is read from the recipe's folder, its 5-step warmup becomes a tenth of the run with a note in the plan;
    a top-level ``max_steps=5`` is refused naming ``train.max_steps``; ``--check`` catches a path that is not there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    small = ["data.seq_len=64", "data.batch_size=2", "eval.passkey_samples=0", "eval.batches=1", "eval.every=0",
             "checkpoint.every=0", "logging.tensorboard=false", "output_dir=run"]
    copy = tmp_path / "mine" / "recipe.yaml"  # a recipe of one's own, next to the model it names
    copy.parent.mkdir()
    copy.write_text(TINY.read_text().replace("path: ../upgrade/assets/tiny-mamba2", "path: ../no-such-model"))
    finetune = [str(Path(sys.executable).parent / "finetune-model")]
    smoke, top_level, check = [subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=elsewhere)
                               for command in (finetune + [str(TINY), "train.max_steps=5", *small],
                                               finetune + [str(TINY), "max_steps=5", *small],
                                               finetune + [str(copy), "--check"])]
    assert smoke.returncode == 0, smoke.stderr[-2000:]
    assert ("note        schedule.warmup_steps 5 does not fit in train.max_steps 5: warming up over 0 step(s), a "
            "tenth of the run") in smoke.stdout
    assert [row["step"] for row in _metrics(elsewhere / "run") if "loss" in row] == [5]
    assert top_level.returncode == 2 and "Traceback" not in top_level.stderr
    assert top_level.stderr.strip().endswith("unknown key max_steps; did you mean train.max_steps?")
    assert check.returncode == 2 and "Traceback" not in check.stderr
    assert f"model.path {tmp_path / 'no-such-model'}" in check.stderr.strip().splitlines()[-1]
    copy.write_text(TINY.read_text().replace("path: ../upgrade/assets/tiny-mamba2", f"path: {EMBEDDED}"))
    again = subprocess.run(finetune + [str(copy), "--check"], capture_output=True, text=True, env=ENV, cwd=elsewhere)
    assert again.returncode == 0 and f"path: {EMBEDDED}" in again.stdout


def test_a_layer_count_override_reads_as_the_text_it_stands_for():
    """``model.upgrade_layers=8`` on the command line parses as a number; the field takes it as "8"."""
    assert load_recipe(TINY, ["model.upgrade_layers=8"]).model.upgrade_layers == "8"
    assert load_recipe(TINY, ["model.upgrade_layers=3-5"]).model.upgrade_layers == "3-5"


def test_cli_check_prints_resolved_recipe_and_rejects_bad_keys():
    ok, bad = run_together((["finetune-model", str(TINY), "train.max_steps=30", "--check"], ENV),
                           (["finetune-model", str(TINY), "optim.lrr=1", "--check"], ENV))
    assert ok.returncode == 0, ok.stderr
    assert "max_steps: 30" in ok.stdout and "grad_accum: 1" in ok.stdout  # defaults are filled in
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        f"finetune-model: error: recipe {TINY}: unknown key optim.lrr; did you mean optim.lr?"]


# --- trainable selection ------------------------------------------------------------------------------------------

def _upgraded_tiny(path: Path = EMBEDDED):
    from palimpsa.upgrade import upgrade_model

    return upgrade_model(path, "2").model


@pytest.mark.parametrize("mode, groups", [("beta", {"beta"}), ("upgraded", {"beta", "upgraded"}),
                                          ("all", {"beta", "other"})])
def test_selection_modes(mode, groups, tiny_random):
    from palimpsa.upgrade.train.trainable import select_trainable

    model = _upgraded_tiny(tiny_random)
    selection = select_trainable(model, load_recipe(TINY, [f"trainable.mode={mode}"]))
    assert set(selection.groups) == groups
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {n for params in selection.groups.values() for n, _ in params}
    if mode == "beta":
        assert trainable and all(".beta_" in n for n in trainable)
    if mode == "upgraded":
        assert all(".layers.1." in n or ".layers.3." in n for n in trainable)
        assert any("in_proj" in n for n in trainable)
    lines = selection.describe(model)
    assert lines[0] == "Trainable parameters" and "total" in lines[-1] and "%" in lines[-1]


@pytest.mark.parametrize("keep", [True, False])
def test_gradient_checkpointing_follows_the_recipe(keep, monkeypatch, tiny_random):
    """model.gradient_checkpointing turns activation checkpointing on; model.keep_scan_outputs picks whether the
    Palimpsa scan's outputs are kept (tests/model/test_activation_checkpointing.py checks what each choice computes)."""
    from palimpsa.upgrade.train import trainer

    calls = []
    monkeypatch.setattr(trainer, "enable_activation_checkpointing",
                        lambda model, keep_scan_outputs: calls.append(keep_scan_outputs))
    recipe = load_recipe(TINY, [f"model.path={tiny_random}", "model.upgrade_layers=2",
                                "model.gradient_checkpointing=true", f"model.keep_scan_outputs={str(keep).lower()}"])
    model, _ = trainer.load_model_for_training(recipe, log=lambda line: None)
    assert calls == [keep] and model.training


def test_patterns_that_match_nothing_are_errors(tiny_random):
    from palimpsa.upgrade.train.trainable import attach_lora, select_trainable

    model = _upgraded_tiny(tiny_random)
    recipe = load_recipe(TINY, ["trainable.mode=patterns", "trainable.patterns=['*.mixer.in_projection*']"])
    with pytest.raises(PalimpsaError, match="matches no parameter; names look like"):
        select_trainable(model, recipe)
    recipe = load_recipe(TINY, ["trainable.mode=patterns", "trainable.patterns=['*.layers.0.mixer.D', "
                                "'*beta_log_gain']"])
    selection = select_trainable(model, recipe)
    assert {n for n, _ in selection.groups["other"]} == {"backbone.layers.0.mixer.D"}
    assert len(selection.groups["beta"]) == 2
    with pytest.raises(PalimpsaError, match="is not a module of the model"):
        attach_lora(_upgraded_tiny(tiny_random), load_recipe(TINY, ["lora.target_modules=[x_proj]"]))


def test_lr_schedule_shapes():
    from palimpsa.upgrade.train.trainable import lr_factor

    recipe = load_recipe(TINY, ["train.max_steps=100", "schedule.warmup_steps=10", "schedule.min_lr_ratio=0.1"])
    assert lr_factor(0, recipe) == pytest.approx(0.1) and lr_factor(9, recipe) == pytest.approx(1.0)
    assert lr_factor(10, recipe) == pytest.approx(1.0) and lr_factor(100, recipe) == pytest.approx(0.1)
    assert lr_factor(55, recipe) == pytest.approx(0.55)  # cosine midpoint: 0.1 + 0.9 * 0.5
    linear = load_recipe(TINY, ["train.max_steps=100", "schedule.warmup_steps=0", "schedule.type=linear"])
    assert lr_factor(50, linear) == pytest.approx(0.55)
    # a decay spanning more steps than the run makes: the run stops part way along it (the same rates until then)
    cut = load_recipe(TINY, ["train.max_steps=55", "schedule.warmup_steps=10", "schedule.min_lr_ratio=0.1",
                             "schedule.total_steps=100"])
    assert [lr_factor(k, cut) for k in (9, 30, 55)] == pytest.approx([lr_factor(k, recipe) for k in (9, 30, 55)])


# --- training runs ------------------------------------------------------------------------------------------------

def _errors(stderr: str) -> str:
    """A failed launch's stderr, shortened: the lines naming an exception (from every process: the one that
    crashed first is often not the last to print), then the end."""
    named = [line for line in stderr.splitlines() if re.search(r"\w+(Error|Exception)\b", line)]
    return "\n".join(named[:40]) + "\n...\n" + stderr[-2000:]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_tiny_recipe_trains_loss_falls_and_only_the_selection_moves(tmp_path, tiny_random):
    """On the random tiny model, where beta alone has much to gain within 30 steps (the pretrained default's
    loss is already near its floor on this data, so a falling-loss check there would measure batch noise)."""
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM
    from palimpsa.upgrade.train.trainer import Trainer

    run = tmp_path / "run"
    recipe = load_recipe(TINY, fast(tiny_random) + [f"output_dir={run}", "trainable.mode=beta", "train.max_steps=30",
                                       "optim.beta_lr=0.05", "logging.tensorboard=true", "eval.every=15",
                                       "checkpoint.every=15"])
    summary = Trainer(recipe, log=lambda _line: None).train()
    rows = [r for r in _metrics(run) if "loss" in r]
    assert [r["step"] for r in rows][:3] == [5, 10, 15] or rows[0]["step"] >= 1
    assert {"step", "loss", "lr", "tokens_per_s"} <= set(rows[0])
    first, last = rows[0]["loss"], rows[-1]["loss"]
    assert last < first - 0.05, (first, last)
    evals = [r for r in _metrics(run) if "eval_nll" in r]
    assert [r["step"] for r in evals] == [15, 30] and all(r["eval_nll"] > 0 for r in evals)
    assert (run / "recipe.yaml").is_file() and any((run / "tensorboard").iterdir())
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000015", "step-0000030"]
    final = PalimpsaForCausalLM.from_pretrained(str(run / "final"))
    assert summary["final"] == str(run / "final")
    base = _upgraded_tiny(tiny_random)
    final_state, base_state = final.state_dict(), base.state_dict()
    moved = [n for n in base_state if not torch.equal(final_state[n], base_state[n])]
    assert moved and all(".beta_" in n for n in moved)
    assert any(n.endswith("beta_log_gain") for n in moved)
    # the gains per layer at every log step, the importance per layer at every evaluation (TensorBoard too)
    layers = base.config.upgraded_layers
    gains = {layer: final.backbone.layers[layer].mixer.gain() for layer in layers}
    assert rows[-1][f"gain/L{layers[0]}"] == pytest.approx(gains[layers[0]].log().mean().exp().item(), rel=1e-5)
    assert rows[-1]["gain_max"] == max(rows[-1][f"gain/L{i}"] for i in layers) and "gain_lr" in rows[-1]
    assert all(f"importance/L{i}/mean_excess" in r and f"importance/L{i}/needle_importance" in r
               for r in evals for i in layers)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard")).Reload()
    assert {f"gain/L{layers[0]}", f"importance/L{layers[0]}/share_above_2x_prior", "train/loss"} <= set(
        events.Tags()["scalars"])

    # final/ is ready to load, evaluate or upload as it is: a card with the hub's metadata, the recipe and the last
    # evaluation (no local path), a generation config, a manifest that lists them
    card = (run / "final" / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["pipeline_tag"] == "text-generation" and metadata["library_name"] == "transformers"
    assert "## Training recipe" in card and "## Evaluation" in card and f'"step": {evals[-1]["step"]}' in card
    assert str(tmp_path) not in card and "trust_remote_code=True" in card
    generation = json.loads((run / "final" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 256 and generation["pad_token_id"] == 256
    listed = json.loads((run / "final" / "export_report.json").read_text())["files"]
    assert "generation_config.json" in listed and "modeling_palimpsa.py" in listed and "README.md" not in listed
    for name, entry in listed.items():
        assert entry["bytes"] == (run / "final" / name).stat().st_size, name


def test_lora_on_chosen_layers_of_a_plain_mamba2(tmp_path, tiny_random, monkeypatch):
    """trainable.mode lora on a plain Mamba2 (the control arm: the adapters of beta+lora, no beta): only the
    adapters of lora.layers train, and the saved model is the plain Mamba2 with them merged. (And the loop's steps
    run with the objects made before them frozen out of the garbage collector's generations, unfrozen after.)"""
    import gc

    from palimpsa.upgrade.convert.checkpoint import load_checkpoint
    from palimpsa.upgrade.train.trainable import attach_lora, lora_layers, select_trainable
    from palimpsa.upgrade.train.trainer import Trainer

    run = tmp_path / "run"
    recipe = load_recipe(TINY, fast(tiny_random) + [
        f"output_dir={run}", "model.upgrade_layers=none", "trainable.mode=lora", "lora.layers=1-2",
        "train.max_steps=3", "optim.lr=0.05", "checkpoint.every=0", "eval.every=0"])
    trainer = Trainer(recipe, log=lambda _line: None)
    frozen, step = [], trainer._train_step
    monkeypatch.setattr(trainer, "_train_step", lambda: (frozen.append(gc.get_freeze_count()), step())[1])
    trainer.train()
    assert len(frozen) == 3 and min(frozen) > 0 and gc.get_freeze_count() == 0
    final = _load_model(run / "final")
    assert final.config.upgraded_layers == [] and not any(".beta_" in n for n, _ in final.named_parameters())
    before = load_checkpoint(tiny_random).load_state_dict(progress=False)
    after = final.state_dict()
    moved = sorted(n for n, t in before.items() if n in after and not torch.equal(t, after[n]))
    assert moved == [f"backbone.layers.{i}.mixer.{m}.weight" for i in (1, 2) for m in ("in_proj", "out_proj")]

    model = _load_model(tiny_random, plain=True)
    assert lora_layers(model, load_recipe(TINY, ["trainable.mode=lora"])) == [0, 1, 2, 3]  # plain: every layer
    upgraded = _upgraded_tiny(tiny_random)
    assert lora_layers(upgraded, load_recipe(TINY, ["trainable.mode=lora"])) == [1, 3]  # else the upgraded ones
    assert lora_layers(upgraded, load_recipe(TINY, ["lora.layers=all"])) == [0, 1, 2, 3]
    adapted = attach_lora(upgraded, load_recipe(TINY, ["trainable.mode=lora", "lora.layers=0-0"]))
    selection = select_trainable(adapted, load_recipe(TINY, ["trainable.mode=lora"]))
    names = [n for n, _ in selection.groups["lora"]]
    assert set(selection.groups) == {"lora"} and names and all(".layers.0.mixer." in n for n in names)
    with pytest.raises(PalimpsaError, match="lora.layers: .*outside the model's layers 0-3"):
        lora_layers(upgraded, load_recipe(TINY, ["lora.layers=7-9"]))


def test_lora_can_start_late_with_a_schedule_of_its_own(tmp_path, tiny_random):
    """lora.start_step (the protocol's delayed adapters): before it the adapters' learning rate is 0 and the merged
    weights are the base's while beta trains; from it on the adapters warm up over lora.warmup_steps and decay with
    the run. Bad combinations are refused when the recipe loads."""
    from palimpsa.upgrade.train.trainable import group_lr_factors
    from palimpsa.upgrade.train.trainer import Trainer

    recipe = load_recipe(TINY, ["trainable.mode=beta+lora", "train.max_steps=100", "schedule.warmup_steps=10",
                                "schedule.min_lr_ratio=0", "lora.start_step=40", "lora.warmup_steps=5"])
    beta, lora = group_lr_factors([{"name": "beta"}, {"name": "lora-nodecay"}], recipe)
    assert beta(0) == pytest.approx(0.1) and beta(9) == lora(44) == pytest.approx(1.0)
    assert lora(0) == lora(39) == 0.0 and lora(40) == pytest.approx(0.2)
    assert lora(45 + 55 // 2) == pytest.approx(0.5, abs=0.03) and lora(100) == pytest.approx(0.0)
    own_warmup = load_recipe(TINY, ["trainable.mode=beta+lora", "train.max_steps=100", "schedule.warmup_steps=10",
                                    "lora.warmup_steps=5"])
    beta, lora = group_lr_factors([{"name": "beta"}, {"name": "lora"}], own_warmup)
    assert beta(0) == pytest.approx(0.1) and lora(0) == pytest.approx(0.2)  # honoured without a late start too
    for bad, message in ((["trainable.mode=beta", "lora.start_step=5"], "applies to LoRA adapters"),
                         (["trainable.mode=lora", "lora.start_step=25", "lora.warmup_steps=5",
                           "train.max_steps=30"], r"start_step \+ lora.warmup_steps \(30\) must be below"),
                         (["trainable.mode=lora", "lora.start_step=25", "schedule.warmup_steps=10",
                           "train.max_steps=30"], r"\(35\) must be below")):  # the default warmup counts
        with pytest.raises(PalimpsaError, match=message):
            load_recipe(TINY, bad)

    run = tmp_path / "run"
    recipe = load_recipe(TINY, fast(tiny_random) + [
        f"output_dir={run}", "trainable.mode=beta+lora", "train.max_steps=5", "lora.start_step=3",
        "lora.warmup_steps=0", "schedule.warmup_steps=0", "optim.lr=0.05", "train.log_every=1",
        "checkpoint.every=3", "checkpoint.keep=2", "eval.every=0"])
    Trainer(recipe, log=lambda _line: None).train()
    rows = [row for row in _metrics(run) if "loss" in row]
    assert [row["beta_lr"] > 0 for row in rows] == [True] * 5
    base = _load_model(tiny_random, plain=True).state_dict()
    projections = [n for n in base if n.endswith(("in_proj.weight", "out_proj.weight"))]
    at_3 = _load_model(run / "checkpoints" / "step-0000003" / "model").state_dict()
    final = _load_model(run / "final").state_dict()
    assert all(torch.equal(at_3[n], base[n]) for n in projections)  # the adapters had not moved yet
    assert rows[2]["gain_geomean"] != pytest.approx(recipe.model.beta_init, rel=1e-3)  # beta had
    assert any(not torch.equal(final[n], base[n]) for n in projections)  # then they did


def _load_model(path: Path, plain: bool = False):
    from palimpsa.upgrade.convert.loading import load_mamba2
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM

    return load_mamba2(path)[0] if plain else PalimpsaForCausalLM.from_pretrained(str(path))


def test_nan_loss_stops_with_the_last_good_checkpoint(tmp_path, monkeypatch, tiny_random):
    from palimpsa.upgrade.train.trainer import NonFiniteLoss, Trainer

    run = tmp_path / "run"
    recipe = load_recipe(TINY, fast(tiny_random) + [f"output_dir={run}", "trainable.mode=beta",
                                                    "train.max_steps=10", "checkpoint.every=3"])
    original = Trainer._forward
    calls = {"n": 0}

    def poisoned(self, batch):
        loss = original(self, batch)
        calls["n"] += 1
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(Trainer, "_forward", poisoned)
    with pytest.raises(NonFiniteLoss, match=r"loss became nan at step 5; stopped, the last good checkpoint is"):
        Trainer(recipe, log=lambda _line: None).train()
    assert (run / "checkpoints" / "step-0000003" / "trainer_state.json").is_file()
    assert not (run / "final").exists()


def test_an_evaluation_leaves_the_saved_tokenizer_as_it_was(tmp_path, tiny_random):
    """The passkey probe generates with left padding and a padding token; it does so on its own copy of the
    tokenizer, so a model directory saved after an evaluation holds the tokenizer the run started with (the tiny test
    model's tokenizer has no padding token: the probe's copy gets one, the saved one must not)."""
    from palimpsa.upgrade.train.trainer import Trainer

    recipe = load_recipe(TINY, fast(tiny_random) + [f"output_dir={tmp_path / 'run'}", "train.max_steps=2",
                                                    "eval.passkey_samples=1", "eval.passkey_length=64",
                                                    "eval.importance=false", "checkpoint.keep=1"])
    trainer = Trainer(recipe, log=lambda _line: None)
    assert trainer.tokenizer.pad_token is None and trainer.tokenizer.padding_side == "right"

    def saved_tokenizer() -> dict[str, bytes]:
        model = trainer.save_checkpoint() / "model"
        return {name: (model / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}

    before = saved_tokenizer()
    row = trainer.evaluate()
    assert "passkey_accuracy" in row  # the probe generated
    assert trainer.tokenizer.pad_token is None and trainer.tokenizer.padding_side == "right"
    assert saved_tokenizer() == before


def test_the_trainer_parts_work_on_their_own(tmp_path, tiny_random):
    """Every attribute exists once the trainer does: a checkpoint saved before any training step loads into a new
    trainer (step 0, the same weights), and ``train`` then runs from there."""
    from palimpsa.upgrade.train.trainer import Trainer

    overrides = fast(tiny_random) + [f"output_dir={tmp_path / 'run'}", "train.max_steps=2", "eval.importance=false"]
    first = Trainer(load_recipe(TINY, overrides), log=lambda _line: None)
    assert (first.step, first.cache, first.last_good) == (0, None, None)
    checkpoint = first.save_checkpoint()
    assert first.last_good == checkpoint and (checkpoint / "model" / "config.json").is_file()
    second = Trainer(load_recipe(TINY, overrides), resume=True, log=lambda _line: None)
    assert (second.step, second.last_good) == (0, checkpoint)
    for (name, a), b in zip(first.model.state_dict().items(), second.model.state_dict().values()):
        assert torch.equal(a, b), name
    summary = second.train()
    assert summary["step"] == 2 and (tmp_path / "run" / "final" / "config.json").is_file()
    assert json.loads((tmp_path / "run" / "eval_summary.json").read_text())["step"] == 2


def _start_then_sigkill(command: list[str], run: Path) -> str | None:
    """Start a 12-step run and SIGKILL it once its step-8 checkpoint is there; what went wrong, or None."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 240
    checkpoint = run / "checkpoints" / "step-0000008"
    while not checkpoint.is_dir() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if not checkpoint.is_dir():
        return "the run ended before its second checkpoint"
    if (run / "final").exists():
        return "the run finished before it was killed"
    return None


@pytest.mark.parametrize("state_passing", [False, True])
def test_sigkill_then_resume_continues_the_same_loss_trajectory(tmp_path, state_passing, tiny_random):
    overrides = fast(tiny_random) + ["trainable.mode=beta+lora", "train.max_steps=12", "train.log_every=1",
                                     "checkpoint.every=4", f"data.state_passing={str(state_passing).lower()}"]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(TINY), *overrides]
    with ThreadPoolExecutor(1) as pool:  # the uninterrupted reference run, alongside the one to kill
        reference_run = pool.submit(subprocess.run, [*command, f"output_dir={reference}"], capture_output=True,
                                    text=True, env=ENV)
        killed_first = _start_then_sigkill([*command, f"output_dir={killed}"], killed)
        done = reference_run.result()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Removed shared tensor" not in done.stderr  # the tied head is saved once, as transformers saves it
    assert killed_first is None, killed_first

    resumed = subprocess.run([*command, f"output_dir={killed}", "--resume"], capture_output=True, text=True,
                             env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Removed shared tensor" not in resumed.stderr
    expected = {r["step"]: r["loss"] for r in _metrics(reference) if "loss" in r}
    got = {r["step"]: r["loss"] for r in _metrics(killed) if "loss" in r}
    assert sorted(got) == list(range(1, 13))  # rows logged after the checkpoint were dropped, then re-logged
    for step in range(1, 13):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step
    assert (killed / "final" / "config.json").is_file()


def test_resume_refuses_a_changed_recipe_and_a_fresh_run_refuses_an_old_one(tmp_path, tiny_random):
    from palimpsa.upgrade.train.trainer import Trainer

    run = tmp_path / "run"
    overrides = fast(tiny_random)
    recipe = load_recipe(TINY, overrides + [f"output_dir={run}", "trainable.mode=beta", "train.max_steps=2"])
    Trainer(recipe, log=lambda _line: None).train()
    with pytest.raises(PalimpsaError, match="holds a run with checkpoints; pass --resume"):
        Trainer(recipe)
    changed = load_recipe(TINY, overrides + [f"output_dir={run}", "trainable.mode=beta", "train.max_steps=2",
                                             "optim.lr=0.5"])
    with pytest.raises(PalimpsaError, match=r"recipe differs from the run's recipe.yaml in \['optim'\]"):
        Trainer(changed, resume=True)
    with pytest.raises(PalimpsaError, match="has no recipe.yaml"):
        Trainer(load_recipe(TINY, overrides + [f"output_dir={tmp_path / 'new'}", "train.max_steps=2"]), resume=True)
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    assert saved["data"].pop("state_passing") is False  # as a recipe written before the field existed
    (run / "recipe.yaml").write_text(yaml.safe_dump(saved))
    Trainer(recipe, resume=True)  # the missing field reads as its default, the recipe's value


def test_yaml_no_reads_as_mixed_precision_no():
    assert load_recipe(TINY, ["train.mixed_precision=no"]).train.mixed_precision == "no"


def test_tf32_follows_the_recipe(tmp_path, tiny_random):
    """``train.tf32`` sets PyTorch's float32 matmul precision to "high" for the run (which also lets the scan's
    backward run chunk-parallel on a GPU); without it the precision is left as it was."""
    from palimpsa.upgrade.train.trainer import Trainer

    before = torch.get_float32_matmul_precision()
    try:
        for flag, want in (("false", before), ("true", "high")):
            torch.set_float32_matmul_precision(before)
            recipe = load_recipe(TINY, fast(tiny_random) + [f"output_dir={tmp_path / flag}", "train.max_steps=2",
                                                            f"train.tf32={flag}"])
            Trainer(recipe, log=lambda _line: None)
            assert torch.get_float32_matmul_precision() == want
    finally:
        torch.set_float32_matmul_precision(before)


def test_two_processes_equal_one_with_gradient_accumulation(tmp_path, tiny_random):
    """Data parallelism on the CPU as a user starts it, with ``torchrun --nproc_per_node 2`` and with ``accelerate
    launch --cpu --num_processes 2`` (which starts one process; the command starts the two): two processes joined
    over gloo, each taking its own share of the one seeded stream, give the weights that one process accumulating
    their two micro-batches gives (so they trained on different batches and averaged their gradients), their weights
    agree at every checkpoint (checked by the trainer), they log the loss one process logs, and only the main process
    writes the run's files. Under
    torchrun, process 1 writes its share of each checkpoint late, and the checkpoint still holds it."""
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM

    bin_dir = Path(sys.executable).parent
    module = ["-m", "palimpsa.upgrade.cli.finetune_model", str(TINY)]
    overrides = fast(tiny_random) + ["trainable.mode=upgraded", "train.max_steps=2", "optim.grad_clip=null",
                                     "checkpoint.every=1", "train.log_every=1"]
    runs = {
        "one": [sys.executable, *module, *overrides, "train.grad_accum=2"],
        # process 1 writes its share of each checkpoint 3 s after process 0 is done with its own (late_process.py)
        "torchrun": [str(bin_dir / "torchrun"), "--standalone", "--nproc_per_node", "2",
                     str(Path(__file__).parent / "late_process.py"), str(TINY), *overrides],
        "accelerate": [str(bin_dir / "accelerate"), "launch", "--cpu", "--num_processes", "2",
                       *module, *overrides],
    }
    results = dict(zip(runs, run_together(*[(command + [f"output_dir={tmp_path / name}"], ENV)
                                            for name, command in runs.items()])))
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {_errors(result.stderr)}"
    one = PalimpsaForCausalLM.from_pretrained(str(tmp_path / "one" / "final")).state_dict()
    for name in ("torchrun", "accelerate"):
        stdout, run_dir = results[name].stdout, tmp_path / name
        assert stdout.count("Plan\n  model ") == 1 and "x 2 process(es)" in stdout, stdout
        assert "processes   2 data-parallel (MULTI_CPU, gloo)" in stdout
        two = PalimpsaForCausalLM.from_pretrained(str(run_dir / "final")).state_dict()
        assert one.keys() == two.keys()
        assert max((one[k] - two[k]).abs().max().item() for k in one) < 1e-6, name
        for step in (1, 2):
            checkpoint = run_dir / "checkpoints" / f"step-{step:07d}"
            assert json.loads((checkpoint / "trainer_state.json").read_text())["processes"] == 2
            assert sorted(p.name for p in (checkpoint / "state").glob("random_states_*")) == [
                "random_states_0.pkl", "random_states_1.pkl"]
        assert [row["step"] for row in _metrics(run_dir) if "loss" in row] == [1, 2]  # one writer
        # the logged loss is the step's, over both processes' micro-batches, as one process accumulating them logs
        assert [row["loss"] for row in _metrics(run_dir) if "loss" in row] == pytest.approx(
            [row["loss"] for row in _metrics(tmp_path / "one") if "loss" in row], rel=1e-5), name
    assert "starting the 2 data-parallel processes" in results["accelerate"].stderr


def test_pretraining_from_scratch_exports_a_mamba_ssm_checkpoint(tmp_path):
    """recipes/pretrain-tiny.yaml's path at toy size: a new Mamba2 trains, its loss falls, and export-model
    --to-mamba2 writes a checkpoint that the loader reads back with the same logits."""
    from palimpsa.upgrade.convert.checkpoint import load_checkpoint
    from palimpsa.upgrade.export.export import export_model
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM, model_from_state_dict
    from palimpsa.upgrade.train.trainer import Trainer

    recipe = load_recipe(ROOT / "recipes" / "pretrain-tiny.yaml", [
        f"output_dir={tmp_path / 'run'}", f"data.tokenizer={EMBEDDED}",
        "model.scratch.d_model=32", "model.scratch.n_layer=2", "model.scratch.d_state=8", "model.scratch.headdim=8",
        "data.seq_len=64", "data.batch_size=2", "train.max_steps=25", "train.mixed_precision=no",
        "schedule.warmup_steps=2", "eval.every=0", "eval.passkey_samples=0", "eval.batches=1",
        "checkpoint.every=0", "logging.tensorboard=false", "train.log_every=1"])
    lines = []
    Trainer(recipe, log=lines.append).train()
    assert "model       a new Mamba2 (d_model 32, 2 layers, d_state 8)" in "\n".join(lines)  # not "None"
    losses = [r["loss"] for r in _metrics(tmp_path / "run") if "loss" in r]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    model = PalimpsaForCausalLM.from_pretrained(str(tmp_path / "run" / "final"))
    assert model.config.upgraded_layers == [] and model.config.base_vocab_size == 257
    export_model(tmp_path / "run", tmp_path / "mamba2", to_mamba2=True)
    checkpoint = load_checkpoint(tmp_path / "mamba2")
    assert checkpoint.format == "mamba_ssm" and [p.name for p in checkpoint.tokenizer_files]
    exported = model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False))
    ids = torch.randint(0, 257, (1, 40))
    with torch.no_grad():
        assert (exported(ids).logits - model(ids).logits).abs().max().item() < 1e-5
