"""scripts/longctx_experiment.py, the protocol's runner: the learning-rate searches grow and choose as the protocol
says, pieces come in its order, the paired statistics are right on constructed scores, and at toy size on the CPU
the whole protocol runs across two calls (the first cut by its deadline), renders its report and prunes models."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import time

import numpy as np
import pytest
import torch
from checkpoints import EMBEDDED, ROOT


@pytest.fixture(scope="module")
def experiment():
    spec = importlib.util.spec_from_file_location("longctx_experiment", ROOT / "scripts" / "longctx_experiment.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["longctx_experiment"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("longctx_experiment", None)


def _ledger(experiment, tmp_path, **settings):
    return experiment.Ledger(tmp_path / "work", experiment.Settings(**settings))


def test_searches_grow_past_an_end_and_the_treatment_takes_the_controls_lora_rate(experiment, tmp_path):
    ledger = _ledger(experiment, tmp_path, arms=("mamba2-lora", "beta-lora"), ablations=())
    assert experiment.grid_points(ledger, "beta-lora") is None  # waits for the control's LoRA rate
    ready, waiting = experiment.next_pieces(ledger)
    assert [p.name for p in ready] == ["test/base", "train/mamba2-lora/lr0.0003/seed0",
                                       "train/mamba2-lora/lr0.001/seed0", "train/mamba2-lora/lr0.003/seed0"]
    assert any("beta-lora's search waits for mamba2-lora" in w for w in waiting)

    def validated(arm, tag, recall):
        ledger.pieces[f"train/{arm}/{tag}/seed0"] = {"model": "x"}
        ledger.pieces[f"val/{arm}/{tag}/seed0"] = {"recall": recall, "rates": {}}

    for tag, recall in (("lr0.0003", 0.2), ("lr0.001", 0.3), ("lr0.003", 0.5)):  # best at the top end
        validated("mamba2-lora", tag, recall)
    assert experiment.grid_points(ledger, "mamba2-lora") == pytest.approx([3e-4, 1e-3, 3e-3, 9e-3])
    assert experiment.chosen_rates(ledger, "mamba2-lora") is None  # the new point runs first
    validated("mamba2-lora", "lr0.009", 0.495)  # within the tie margin of 0.5: the smaller rate wins, inside
    assert experiment.chosen_rates(ledger, "mamba2-lora") == {"lr": pytest.approx(3e-3)}
    assert experiment.grid_points(ledger, "beta-lora") == pytest.approx([3e-3, 1e-2, 3e-2])
    for tag, recall in (("beta_lr0.003", 0.7), ("beta_lr0.01", 0.5), ("beta_lr0.03", 0.4)):  # best at the bottom
        validated("beta-lora", tag, recall)
    assert experiment.grid_points(ledger, "beta-lora")[0] == pytest.approx(1e-3)  # the small end grows
    validated("beta-lora", "beta_lr0.001", 0.1)
    assert experiment.chosen_rates(ledger, "beta-lora") == {"beta_lr": pytest.approx(3e-3),
                                                            "lr": pytest.approx(3e-3)}
    ready, _ = experiment.next_pieces(ledger)
    names = [p.name for p in ready]
    # seed 0's test evaluates the chosen rate's model, not the first grid point's
    assert next(p for p in ready if p.name == "test/mamba2-lora/seed0").train == "train/mamba2-lora/lr0.003/seed0"
    # evaluations of trained models come first (a model lives for one call), then seeds, primary pair first
    assert names[0] == "test/base" and names.index("test/mamba2-lora/seed0") < names.index(
        "train/mamba2-lora/lr0.003/seed1")
    assert "train/beta-lora/beta_lr0.003/seed4" in names and "train/mamba2-lora/lr0.003/seed4" in names
    recipe = experiment.recipe_for(ready[names.index("train/beta-lora/beta_lr0.003/seed1")], ledger.settings
                                   .__class__(base=str(EMBEDDED)), tmp_path, "cpu")
    assert recipe["lora"]["start_step"] == 180 and recipe["lora"]["layers"] == "all"
    assert recipe["optim"] == {"lr": pytest.approx(3e-3), "beta_lr": pytest.approx(3e-3), "weight_decay": 0.0,
                               "grad_clip": 1.0}
    assert recipe["model"]["upgrade_layers"] == "0-4" and recipe["data"]["seed"] == 8


def test_the_primary_pair_runs_through_before_the_other_arms_and_the_ablations(experiment, tmp_path):
    """The verdict needs the primary pair alone: its searches and seeds come before any other arm's fine-tune, and
    the ablations come last."""
    ledger = _ledger(experiment, tmp_path)  # every arm and ablation, as the protocol runs
    ledger.pieces["test/base"] = {}
    for tag, recall in (("lr0.0003", 0.2), ("lr0.001", 0.5), ("lr0.003", 0.3)):
        ledger.pieces[f"train/mamba2-lora/{tag}/seed0"] = {"model": "x"}
        ledger.pieces[f"val/mamba2-lora/{tag}/seed0"] = {"recall": recall, "rates": {}}
    for tag, recall in (("beta_lr0.003", 0.3), ("beta_lr0.01", 0.6), ("beta_lr0.03", 0.2)):
        ledger.pieces[f"train/beta-lora/{tag}/seed0"] = {"model": "x"}
        ledger.pieces[f"val/beta-lora/{tag}/seed0"] = {"recall": recall, "rates": {}}
    names = [p.name for p in experiment.next_pieces(ledger)[0] if p.kind == "train"]
    first_other = min(i for i, n in enumerate(names) if n.split("/")[1] not in experiment.PRIMARY)
    primary = [n for n in names if n.split("/")[1] in experiment.PRIMARY and "ablation" not in n]
    assert primary and max(names.index(n) for n in primary) < first_other
    assert "train/mamba2-lora/lr0.001/seed1" in primary and "train/beta-lora/beta_lr0.01/seed4" in primary
    ablations = [i for i, n in enumerate(names) if "ablation" in n]
    assert ablations and min(ablations) > max(i for i, n in enumerate(names) if "ablation" not in n)


def test_a_flat_search_is_not_extended_and_takes_the_smallest_rate(experiment, tmp_path):
    ledger = _ledger(experiment, tmp_path, arms=("beta",), ablations=())
    for tag in ("beta_lr0.003", "beta_lr0.01", "beta_lr0.03"):
        ledger.pieces[f"val/beta/{tag}/seed0"] = {"recall": 0.0, "rates": {}}
    assert experiment.grid_points(ledger, "beta") == pytest.approx([3e-3, 1e-2, 3e-2])
    assert experiment.chosen_rates(ledger, "beta") == {"beta_lr": pytest.approx(3e-3), "lr": pytest.approx(3e-3)}


def test_models_live_until_no_evaluation_needs_them(experiment, tmp_path):
    """prune keeps a search's seed-0 models until the choice is made, then drops the others and keeps the chosen
    one for its test; an evaluation whose model is gone (another machine) sends its fine-tune back to the queue."""
    ledger = _ledger(experiment, tmp_path, arms=("mamba2-lora",), ablations=(), grids={"mamba2-lora": [1e-3, 3e-3]})
    ledger.pieces["test/base"] = {}
    models = {}
    for tag in ("lr0.001", "lr0.003"):
        final = tmp_path / "scratch" / tag / "final"
        final.mkdir(parents=True)
        (final / "config.json").write_text("{}")
        models[tag] = final
        ledger.pieces[f"train/mamba2-lora/{tag}/seed0"] = {"model": str(final), "seconds": 1e6}
    ledger.pieces["val/mamba2-lora/lr0.001/seed0"] = {"recall": 0.5, "rates": {}}
    experiment.prune(ledger)
    assert all(m.is_dir() for m in models.values())  # the search is not over: both stay
    ledger.pieces["val/mamba2-lora/lr0.003/seed0"] = {"recall": 0.495, "rates": {}}  # a tie: the smaller
    experiment.prune(ledger)
    assert models["lr0.001"].is_dir() and not models["lr0.003"].parent.exists()  # the chosen one waits for its test

    shutil.rmtree(models["lr0.001"])  # a fresh machine: the chosen model is gone
    lines = []
    assert experiment.run(ledger, tmp_path / "scratch", 0.05, "cpu", log=lines.append) == 0
    assert "train/mamba2-lora/lr0.001/seed0" not in ledger.pieces  # it trains again (first, it is seed 0)
    assert any("trains again" in line for line in lines) and any("stopping here" in line for line in lines)


def test_a_treatment_seed_fits_a_call_with_its_first_evaluation(experiment, tmp_path):
    """With the H100's costs on a fresh machine (a fine-tune 163 s, a test evaluation 236 s) a treatment seed with
    its test, beta-off test and importance probe needs more than a 9-minute call: it is started with room for its
    first evaluation (the model waits or trains again for the rest) instead of never; a control seed needs its one
    test."""
    ledger = _ledger(experiment, tmp_path)
    ledger.pieces.update({"train/mamba2-lora/lr0.001/seed0": {"seconds": 163.0}, "test/base": {"seconds": 236.0},
                          "importance/beta-lora/seed0": {"seconds": 30.0}})
    treatment = experiment.Piece("train/beta-lora/beta_lr0.01/seed1", "train", "beta-lora", 1, {})
    control = experiment.Piece("train/mamba2-lora/lr0.001/seed1", "train", "mamba2-lora", 1, {})
    whole = 1.1 * (163 + 2 * 236 + 30) + 10
    assert experiment._estimate(ledger, treatment) == pytest.approx(whole)  # no call limit: all of it
    assert whole > 540 and experiment._estimate(ledger, treatment, 540) == pytest.approx(1.1 * (163 + 236) + 10)
    assert experiment._estimate(ledger, control, 540) == pytest.approx(1.1 * (163 + 236) + 10)
    assert 1.1 * (163 + 236) + 10 < 540


def test_estimates_use_the_arms_own_fine_tunes_and_the_median_once_warm(experiment, tmp_path):
    """A call's first piece pays for compiling Triton's kernels on a fresh machine (the slowest so far); later
    pieces are costed at the median, and a fine-tune at its own arm's times (the treatment's scan is slower)."""
    ledger = _ledger(experiment, tmp_path)
    ledger.pieces.update({"train/mamba2-lora/lr0.001/seed0": {"seconds": 207.0},
                          "train/mamba2-lora/lr0.003/seed0": {"seconds": 103.0},
                          "train/mamba2-lora/lr0.0003/seed0": {"seconds": 108.0},
                          "train/beta-lora/beta_lr0.01/seed0": {"seconds": 187.0},
                          "test/base": {"seconds": 236.0}, "test/mamba2-lora/seed0": {"seconds": 162.0},
                          "test/beta-lora/seed0": {"seconds": 164.0}})
    control = experiment.Piece("train/mamba2-lora/lr0.001/seed1", "train", "mamba2-lora", 1, {})
    treatment = experiment.Piece("train/beta-lora/beta_lr0.01/seed1", "train", "beta-lora", 1, {})
    plain = experiment.Piece("train/mamba2-full/lr0.001/seed1", "train", "mamba2-full", 1, {})
    assert experiment._estimate(ledger, control) == pytest.approx(1.1 * (207 + 236) + 10)
    assert experiment._estimate(ledger, control, warm=True) == pytest.approx(1.1 * (108 + 164) + 10)
    assert experiment._estimate(ledger, treatment, 540, warm=True) == pytest.approx(1.1 * (187 + 164) + 10)
    assert experiment._estimate(ledger, plain, warm=True) == pytest.approx(1.1 * (147.5 + 164) + 10)  # all arms'
    test = experiment.Piece("test/mamba2-lora/seed1", "test", "mamba2-lora", 1, {})
    assert experiment._estimate(ledger, test, warm=True) == pytest.approx(1.2 * 164 + 5)
    assert experiment._estimate(ledger, test) == pytest.approx(1.2 * 236 + 5)


def test_a_call_on_a_machine_kept_warm_costs_its_first_piece_at_the_median(experiment, tmp_path):
    """Once a piece has landed on a machine its kernels are compiled, so the next call there (the machine kept
    warm: --scratch stays) costs its first piece at the median, not at the slowest (a fresh machine's)."""
    ledger = _ledger(experiment, tmp_path)
    ledger.pieces.update({"test/mamba2-lora/seed0": {"seconds": 236.0}, "test/beta-lora/seed0": {"seconds": 162.0},
                          "test/mamba2-lora/seed1": {"seconds": 164.0}})
    scratch = tmp_path / "scratch"

    def needs() -> float:
        lines = []
        assert experiment.run(ledger, scratch, 0.05, "cpu", log=lines.append) == 0
        found = [re.search(r"test/base needs about ([0-9.]+)", line) for line in lines]
        return float(next(m.group(1) for m in found if m))

    assert needs() == pytest.approx((1.2 * 236 + 5) / 60, abs=0.05)  # fresh: the slowest
    assert not scratch.exists()  # nothing landed: no mark
    scratch.mkdir()
    (scratch / experiment.WARM_MARK).touch()  # what a landed piece leaves
    assert needs() == pytest.approx((1.2 * 164 + 5) / 60, abs=0.05)


def test_a_model_left_by_an_earlier_call_is_not_trained_again_nor_timed(experiment, tmp_path):
    """A warm machine keeps --scratch between calls; when the call that trained a model did not return its ledger,
    the next call finds the model, lands it without a time (its real one is unknown), and estimates skip it."""
    ledger = _ledger(experiment, tmp_path)
    piece = experiment.Piece("train/mamba2-lora/lr0.001/seed1", "train", "mamba2-lora", 1, {"lr": 1e-3})
    run = tmp_path / "scratch" / piece.name.replace("/", "__")
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 600, "loss": 0.4, "tokens_per_s": 2e5}) + "\n")
    result = experiment.fine_tune(piece, ledger, tmp_path / "scratch", time.monotonic() + 60, "cpu")
    assert result["reused"] and result["model"] == str(run / "final") and result["final_loss"] == 0.4
    ledger.pieces.update({"train/mamba2-lora/lr0.001/seed0": {"seconds": 200.0}, piece.name: result,
                          "test/base": {"seconds": 160.0}})
    control = experiment.Piece("train/mamba2-lora/lr0.001/seed2", "train", "mamba2-lora", 2, {})
    assert experiment._estimate(ledger, control, warm=True) == pytest.approx(1.1 * (200 + 160) + 10)


def test_an_evaluation_gives_its_cached_gpu_memory_back_before_the_next_piece(experiment, tmp_path, monkeypatch):
    """Evaluations run in the runner's process and fine-tunes in a child: the memory PyTorch cached for an
    evaluation must go back to the driver before the next piece, or a full fine-tune runs out beside it."""
    events = []
    monkeypatch.setattr(experiment, "evaluate", lambda piece, ledger, device: (events.append(piece.name)
                                                                               or ({"seconds": 1.0}, None)))
    monkeypatch.setattr(experiment, "release_memory", lambda: events.append("released"))
    monkeypatch.setattr(experiment, "fine_tune", lambda *args: None)  # the piece after it, a fine-tune, is cut
    experiment.run(_ledger(experiment, tmp_path), tmp_path / "scratch", 5, "cpu", log=lambda line: None)
    assert events == ["test/base", "released"]


class _Lanes:
    """Stand-ins for fine_tune and evaluate that record what overlapped: a fine-tune waits until an evaluation has
    started beside it (or 1 s passes), so the overlap is certain; ``fail`` names pieces that fail once."""

    def __init__(self, experiment, tmp_path, fail=()):
        import threading

        self.experiment, self.tmp_path, self.fail = experiment, tmp_path, set(fail)
        self.events, self.in_flight, self.started = [], set(), threading.Condition()
        self.evaluations = 0  # started so far

    def fine_tune(self, piece, ledger, scratch, deadline, device):
        with self.started:
            self.in_flight.add(piece.name)
            begun = self.evaluations
            self.started.wait_for(lambda: self.evaluations > begun, timeout=1.0)
        time.sleep(0.05)  # still in flight a moment after the evaluation beside it began
        with self.started:
            self.in_flight.discard(piece.name)
        if piece.name in self.fail:
            self.fail.discard(piece.name)
            raise SystemExit(f"longctx_experiment: {piece.name} failed (exit 1)")
        final = self.tmp_path / "scratch" / piece.name.replace("/", "__") / "final"
        final.mkdir(parents=True, exist_ok=True)
        (final / "config.json").write_text("{}")
        self.events.append(("trained", piece.name))
        return {"rates": piece.rates, "seed": piece.seed, "model": str(final), "final_loss": 1.0}

    def evaluate(self, piece, ledger, device):
        with self.started:  # a fine-tune submitted just before may not have begun in its thread yet
            self.started.wait_for(lambda: self.in_flight, timeout=0.3)
            beside = sorted(self.in_flight)
            self.evaluations += 1
            self.started.notify_all()
        if piece.name in self.fail and beside:
            self.fail.discard(piece.name)
            raise torch.OutOfMemoryError("CUDA out of memory")
        if piece.name == "test/base":
            time.sleep(0.5)  # long after the fine-tune beside it has ended
        self.events.append(("evaluated", piece.name, tuple(beside)))
        return ({"recall": 0.5, "rates": piece.rates} if piece.kind == "val" else {"seconds": 1.0}), None


def _overlapped(experiment, tmp_path, monkeypatch, fail=()):
    lanes = _Lanes(experiment, tmp_path, fail)
    monkeypatch.setattr(experiment, "fine_tune", lanes.fine_tune)
    monkeypatch.setattr(experiment, "evaluate", lanes.evaluate)
    monkeypatch.setattr(experiment, "release_memory", lambda: None)
    monkeypatch.setattr(experiment, "_where", lambda device: {})
    ledger = _ledger(experiment, tmp_path, arms=("mamba2-lora",), ablations=(), seeds={"mamba2-lora": 1},
                     grids={"mamba2-lora": [1e-3, 3e-3]})
    lines = []
    landed = experiment.run(ledger, tmp_path / "scratch", 0.5, "cpu", log=lines.append, overlap=True)
    return lanes, ledger, lines, landed


def test_overlap_trains_the_next_fine_tune_beside_the_evaluations(experiment, tmp_path, monkeypatch):
    """--overlap: the base's evaluation runs while the first fine-tune trains, the second fine-tune trains while the
    first one's validation runs; every piece lands once, and those that shared the GPU say so."""
    lanes, ledger, lines, landed = _overlapped(experiment, tmp_path, monkeypatch)
    evaluated = {e[1]: e[2] for e in lanes.events if e[0] == "evaluated"}
    assert evaluated["test/base"] == ("train/mamba2-lora/lr0.001/seed0",)
    assert evaluated["val/mamba2-lora/lr0.001/seed0"] == ("train/mamba2-lora/lr0.003/seed0",)
    assert set(ledger.pieces) == {"test/base", "train/mamba2-lora/lr0.001/seed0", "val/mamba2-lora/lr0.001/seed0",
                                  "train/mamba2-lora/lr0.003/seed0", "val/mamba2-lora/lr0.003/seed0",
                                  "test/mamba2-lora/seed0"}
    assert landed == 6 and "nothing left to run" in lines[-1]
    trained = [e[1] for e in lanes.events if e[0] == "trained"]
    assert len(trained) == 2 == len(set(trained))  # the chosen rate's seed 0 is the search's model
    assert ledger.pieces["test/base"]["overlapped"] and ledger.pieces["train/mamba2-lora/lr0.001/seed0"]["overlapped"]
    assert ledger.pieces["train/mamba2-lora/lr0.001/seed0"]["seconds"] < 0.4  # its own time, not the evaluation's
    assert "overlapped" not in ledger.pieces["test/mamba2-lora/seed0"]  # nothing trained beside it
    assert not list((tmp_path / "scratch").glob("*/final"))  # pruned once evaluated


@pytest.mark.parametrize("failing", ["test/base", "train/mamba2-lora/lr0.001/seed0"])
def test_overlap_falls_back_to_one_piece_at_a_time_after_a_failure_beside_the_other_lane(
        experiment, tmp_path, monkeypatch, failing):
    """An evaluation out of GPU memory beside a fine-tune, or a fine-tune that fails beside an evaluation, is not the
    end of the call: the rest runs one piece at a time, the failed piece again first."""
    lanes, ledger, lines, landed = _overlapped(experiment, tmp_path, monkeypatch, fail=[failing])
    assert any("runs one piece at a time" in line for line in lines)
    assert landed == 6 and len(ledger.pieces) == 6 and failing in ledger.pieces
    trained = [e[1] for e in lanes.events if e[0] == "trained"]
    assert sorted(trained) == sorted(set(trained))  # nothing finished was lost and trained again
    later = [e for e in lanes.events if e[1] != "test/base" and e[0] == "evaluated"]
    assert later and all(beside == () for _, _, beside in later)  # after the failure, nothing overlaps


def test_overlap_starts_a_fine_tune_when_its_own_time_fits(experiment, tmp_path):
    """Beside the evaluations a fine-tune is costed alone (its evaluations may follow in the next call), slowed by
    the shared GPU."""
    ledger = _ledger(experiment, tmp_path)
    ledger.pieces.update({"train/mamba2-lora/lr0.001/seed0": {"seconds": 163.0}, "test/base": {"seconds": 236.0}})
    control = experiment.Piece("train/mamba2-lora/lr0.001/seed1", "train", "mamba2-lora", 1, {})
    assert experiment._estimate(ledger, control, alone=True) == pytest.approx(1.1 * 163 + 10)


def test_an_evaluations_prompts_are_built_once_per_process(experiment, monkeypatch):
    """Every test evaluation of a call asks for the same prompts: built once (38 s on a CPU), and again for another
    tokenizer or suite."""
    from palimpsa.upgrade.convert.loading import load_tokenizer
    from palimpsa.upgrade.evaluate import distance

    built = []
    real = distance.distance_suite
    monkeypatch.setattr(distance, "distance_suite", lambda *a, **k: built.append(a[2:]) or real(*a, **k))
    monkeypatch.setattr(experiment, "_SUITES", {})
    tokenizer = load_tokenizer(str(EMBEDDED), str(EMBEDDED), required=True)
    first = experiment.suite(tokenizer, 512, ("passkey",), ((64, 128),), 2, 0)
    assert experiment.suite(tokenizer, 512, ("passkey",), ((64, 128),), 2, 0) is first and len(built) == 1
    experiment.suite(tokenizer, 512, ("passkey",), ((64, 128),), 2, 1)  # another seed
    tokenizer.add_tokens(["<other>"])
    experiment.suite(tokenizer, 512, ("passkey",), ((64, 128),), 2, 0)  # another tokenizer
    assert len(built) == 3


def _records(scores: dict[str, list[int]], bucket: str = "2048-4096") -> dict:
    return {task: {bucket: {"score": values, "of": 1}} for task, values in scores.items()}


def test_the_paired_contrast_on_constructed_scores(experiment, tmp_path):
    ledger = _ledger(experiment, tmp_path, tasks=("passkey", "repeat"), resamples=2000)
    rng = np.random.default_rng(0)
    truth = {"passkey": 0.3, "repeat": 0.1}
    for seed in range(4):
        control = {t: rng.integers(0, 2, 200).tolist() for t in truth}
        # the treatment answers what the control did, and turns a share of its misses into hits
        treated = {t: [1 if v or rng.random() < truth[t] / 0.5 else 0 for v in values]
                   for t, values in control.items()}
        ledger.land(f"test/mamba2-lora/seed{seed}", {}, _records(control))
        ledger.land(f"test/beta-lora/seed{seed}", {}, _records(treated))
        ledger.land(f"test/beta-lora@beta0/seed{seed}", {}, _records(control))
    buckets = [3]  # 2048-4096
    result = experiment.contrast(ledger, "beta-lora", "mamba2-lora", buckets)
    assert result["seeds"] == 4
    assert result["interval"][0] < result["estimate"] < result["interval"][1]
    assert result["interval"][0] > 0.1 and abs(result["estimate"] - 0.2) < 0.05
    same = experiment.contrast(ledger, "beta-lora@beta0", "mamba2-lora", buckets)
    assert same["estimate"] == 0 and same["interval"] == [0.0, 0.0]  # paired: identical answers differ by nothing
    assert experiment.contrast(ledger, "beta", "mamba2-lora", buckets) is None


def test_the_protocol_at_toy_size_across_two_calls(experiment, tmp_path, capsys):
    work, scratch, output = tmp_path / "work", tmp_path / "scratch", tmp_path / "out"
    options = ["--work", str(work), "--scratch", str(scratch), "--base", str(EMBEDDED), "--device", "cpu",
               "--steps", "3", "--batch-size", "1", "--train-length", "256", "--pretrain-length", "128",
               "--buckets", "128,256,512", "--tasks", "passkey,mqar_interference_8", "--per-bucket", "2",
               "--validation-per-task", "2", "--nll-windows", "2", "--nll-multiple", "2",
               "--importance-distance", "256", "--eval-batch", "4", "--resamples", "200",
               "--arms", "mamba2-lora,beta-lora", "--ablations", "state-passing-off",
               "--seeds", "mamba2-lora=1", "--seeds", "beta-lora=1", "--grid", "mamba2-lora=1e-3",
               "--grid", "beta-lora=1e-2"]
    module = experiment
    assert module.main(["run", *options, "--minutes", "0.001"]) == 0  # the base's evaluation, then the deadline
    first = json.loads((work / "ledger.json").read_text())
    assert list(first["pieces"]) == ["test/base"]
    assert "stopping here" in capsys.readouterr().out
    assert (scratch / module.WARM_MARK).is_file()  # a piece landed: the next call here costs at the median
    ledger = module.Ledger(work)
    cut = module.Piece("train/mamba2-lora/lr0.001/seed0", "train", "mamba2-lora", 0, {"lr": 1e-3})
    assert module.fine_tune(cut, ledger, scratch, time.monotonic(), "cpu") is None  # stopped at its deadline
    with pytest.raises(SystemExit, match="other settings \\(steps\\)"):
        module.main(["run", *[o if o != "3" else "4" for o in options]])
    assert module.main(["run", "--work", str(work), "--scratch", str(scratch), "--device", "cpu",
                        "--minutes", "20"]) == 0  # the settings come from the ledger
    pieces = json.loads((work / "ledger.json").read_text())["pieces"]
    assert set(pieces) == {"test/base", "train/mamba2-lora/lr0.001/seed0", "val/mamba2-lora/lr0.001/seed0",
                           "test/mamba2-lora/seed0", "train/beta-lora/beta_lr0.01/seed0",
                           "val/beta-lora/beta_lr0.01/seed0", "test/beta-lora/seed0",
                           "test/beta-lora@beta0/seed0", "importance/beta-lora/seed0",
                           "train/beta-lora/ablation-state-passing-off/seed0",
                           "test/ablation-state-passing-off/seed0"}
    assert not list(scratch.glob("train__*/final"))  # every model pruned once evaluated
    records = json.loads((work / pieces["test/beta-lora/seed0"]["records"]).read_text())
    assert set(records) == {"passkey", "mqar_interference_8"} and len(records["passkey"]["128-256"]["score"]) == 2
    assert records["mqar_interference_8"]["256-512"]["of"] == 8
    assert len(records["mqar_interference_8"]["256-512"]["stale"]) == 2
    assert pieces["test/beta-lora@beta0/seed0"]["beta_scale"] == 0.0
    assert {"layer", "needle_share_above_2x_prior_at_question"} <= set(pieces["importance/beta-lora/seed0"]
                                                                        ["layers"][0])
    assert module.main(["report", "--work", str(work), "--output", str(output)]) == 0
    state = json.loads((output / "longctx.json").read_text())
    assert state["verdict"]["decided"] and state["verdict"]["primary"]["seeds"] == 1
    assert set(state["summary"]) == {"base", "mamba2-lora", "beta-lora", "beta-lora@beta0",
                                     "ablation-state-passing-off"}
    text = (output / "longctx.md").read_text()
    assert "**Verdict: " in text and "| beta-lora | 1 |" in text and "Not yet run" not in text
    assert "Pieces ran on: " in text and "(11 pieces)" in text
    assert "mqar_interference_8, answered with the overwritten value" in text
    assert (output / "longctx" / "recall.png").stat().st_size > 0
    assert (output / "longctx" / "importance-beta-lora-seed0.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="no base model at"):
        module.main(["run", "--work", str(tmp_path / "other"), "--base", str(tmp_path / "missing")])
    unmet = tmp_path / "unmet"
    shutil.copytree(EMBEDDED, unmet)
    (unmet / "training").mkdir(exist_ok=True)
    (unmet / "training" / "summary.json").write_text(json.dumps({"bar": {"met": False}}))
    with pytest.raises(SystemExit, match="does not meet its recall bar"):
        module.main(["run", "--work", str(tmp_path / "other"), "--base", str(unmet)])


def test_the_parameterisation_ablation_starts_from_a_linear_dt_upgrade(experiment, tmp_path):
    """gain-linear-dt: every layer upgraded in the first format (a plain per-head gain times dt) at the same initial
    gain, the other weights the base's; its recipe trains it at beta_lr as that format was."""
    from palimpsa.upgrade.convert.loading import load_mamba2
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM

    folder = experiment.linear_dt_model(str(EMBEDDED), tmp_path)
    model = PalimpsaForCausalLM.from_pretrained(str(folder))
    assert model.config.beta_form == "linear-dt" and model.config.upgraded_layers == [0, 1, 2, 3, 4]
    mixers = model.palimpsa_mixers()
    assert all(m.gain().tolist() == pytest.approx([1e-3] * m.nheads) for m in mixers)
    base = load_mamba2(EMBEDDED)[0].state_dict()
    state = model.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in base.items())
    assert experiment.linear_dt_model(str(EMBEDDED), tmp_path) == folder  # written once
    ledger = _ledger(experiment, tmp_path, base=str(EMBEDDED))
    piece = experiment.Piece("train/beta-lora/ablation-gain-linear-dt/seed0", "train", "beta-lora", 0,
                             {"lr": 1e-3, "beta_lr": 1e-2}, "gain-linear-dt")
    recipe = experiment.recipe_for(piece, ledger.settings, tmp_path, "cpu")
    assert recipe["model"] == {"path": str(folder), "dtype": "float32"}


@pytest.mark.parametrize("options, message", [
    (["--seeds", "foo"], "--seeds 'foo': give ARM=VALUE"),
    (["--grid", "beta=abc"], "--grid 'beta=abc': give ARM=VALUE"),
    (["--buckets", "512,256"], "give rising token counts"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--arms", "nope"], "unknown arm 'nope'"),
    (["--ablations", "nope"], "unknown ablation 'nope'"),
    (["--tasks", "passkey,x"], "unknown distance task 'x'"),
    (["--buckets", "64,128,256", "--train-length", "128"],
     "mqar_gap_96's pairs take more tokens than the first bucket 64-128"),
    (["--buckets", "256,512,1024"], "need one within the fine-tuning length 2048 (validation) and one from it on"),
    (["--grid", "beta-lora-concurrent=1e-3"], "--grid beta-lora-concurrent: that arm takes beta-lora's rates"),
])
def test_bad_settings_are_one_line_refusals_before_any_work(experiment, tmp_path, options, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        experiment.main(["plan", "--work", str(tmp_path / "work"), *options])
    assert not (tmp_path / "work").exists()
