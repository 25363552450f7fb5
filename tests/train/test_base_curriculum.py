"""scripts/pretrain_base_curriculum.py at toy size on the CPU: stages run in order, each after the first from the
one before with a fresh optimizer; a curriculum moves to a fresh machine between stages and after its end through
--pack / --unpack (weights in bf16 there) and mid-stage (the checkpoint whole); the finished base ships with its
bar and the whole log; bad curriculum files are one-line refusals."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest
import torch
import yaml
from checkpoints import ROOT

TOY = ["model.scratch.d_model=32", "model.scratch.n_layer=2", "model.scratch.d_state=8", "model.scratch.headdim=8",
       "data.seq_len=64", "data.batch_size=2", "train.mixed_precision=no", "eval.batches=1",
       "eval.passkey_samples=0", "logging.tensorboard=false", "train.log_every=1"]


@pytest.fixture(scope="module")
def curriculum_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("pretrain_base_curriculum",
                                                      ROOT / "scripts" / "pretrain_base_curriculum.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


def _write(tmp_path, stages, name="curriculum.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"recipe": str(ROOT / "recipes" / "pretrain-base.yaml"), "overrides": TOY,
                                    "lr": 3e-3, "stages": stages}))
    return path


def _weights(run):
    from safetensors.torch import load_file

    return {k: v for shard in sorted((run / "final").glob("model*.safetensors")) for k, v in load_file(shard).items()}


def test_stages_in_order_across_fresh_machines(curriculum_module, tmp_path):
    module = curriculum_module
    first = module.load_curriculum(_write(tmp_path, [{"variant": "continue", "steps": 3}]))
    two = module.load_curriculum(_write(tmp_path, [{"variant": "continue", "steps": 3},
                                                   {"variant": "mqar-small", "steps": 2, "lr": 1e-3}], "two.yaml"))
    recipe = module.stage_recipe(two, 1, tmp_path / "init", workers=0)
    assert recipe["train"]["max_steps"] == 2 and recipe["optim"]["lr"] == 1e-3
    assert recipe["schedule"] == {"type": "constant", "warmup_steps": 100}
    assert recipe["model"]["path"] == str(tmp_path / "init") and recipe["model"]["upgrade_layers"] == "none"
    assert [s["task"] for s in recipe["data"]["sources"] if s.get("task")] == ["mqar"]  # MQAR alone, 2-16 pairs
    anneal = module.stage_recipe({**two, "stages": [{"variant": "anneal", "steps": 150}]}, 0, None, 0)
    assert anneal["schedule"]["type"] == "cosine" and anneal["train"]["max_steps"] == 150
    # the mixture with several NIAH questions per document, annealed the same way (not held at a constant rate)
    multi = module.stage_recipe({**two, "stages": [{"variant": "multi-anneal", "steps": 150}]}, 0, tmp_path, 0)
    assert multi["schedule"]["type"] == "cosine" and multi["train"]["max_steps"] == 150
    assert [s.get("queries") for s in multi["data"]["sources"] if s.get("task") == "niah-fwpkm"] == [[1, 3]]

    # stage 0 on machine A; A packs between stages (the next stage has no checkpoint yet)
    run_a = tmp_path / "a"
    state = module.Curriculum(first, run_a)
    state.advance(float("inf"), workers=0)
    assert state.finished and state.state["done"][0]["steps"] == 3
    stage0 = _weights(state.stage_dir(0))
    between = module.Curriculum(two, run_a)  # the longer curriculum at its stage 1
    between.pack(tmp_path / "pack")
    assert "pack/init" in _packed(tmp_path / "pack")

    # machine B goes on from the pack: stage 1 starts from stage 0's weights (in bf16: a fresh optimizer starts
    # there anyway, and the pack stays small)
    run_b = tmp_path / "b"
    resumed = module.Curriculum(two, run_b)
    resumed.unpack(tmp_path / "pack")
    init = resumed.init_of(1)
    from safetensors.torch import load_file

    rebuilt = {k: v for s in sorted(init.glob("model*.safetensors")) for k, v in load_file(s).items()}
    assert all(torch.equal(rebuilt[k], stage0[k].bfloat16().float()) for k in stage0 if k in rebuilt)
    assert len(rebuilt) >= len(stage0) - 1
    resumed.advance(float("inf"), workers=0)
    assert resumed.finished and [d["variant"] for d in resumed.state["done"]] == ["continue", "mqar-small"]
    rows = resumed.metrics()
    assert [(r["stage"], r["step"]) for r in rows if "loss" in r] == [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5)]
    stage1 = _weights(resumed.stage_dir(1))
    assert any(not torch.equal(stage1[k], stage0[k]) for k in stage0 if k in stage1)  # stage 1 trained

    # after the end, machine C rebuilds the final model from the pack
    resumed.pack(tmp_path / "done")
    run_c = tmp_path / "c"
    finished = module.Curriculum(two, run_c)
    finished.unpack(tmp_path / "done")
    assert finished.finished
    final = _weights(finished.stage_dir(1))
    assert final and all(torch.equal(final[k], stage1[k].bfloat16().float()) for k in stage1 if k in final)
    assert not any("exp_avg_sq" in n for n in _packed(tmp_path / "done"))  # a finished base needs no optimizer


def _packed(folder):
    """The names in a pack (its pieces, joined)."""
    import io
    import tarfile

    pieces = sorted(folder.glob("pack.tar.*"))
    assert pieces and all(p.stat().st_size <= 15 * 10**6 for p in pieces)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in pieces))) as tar:
        return tar.getnames()


def test_a_stage_cut_midway_goes_on_on_another_machine(curriculum_module, tmp_path, monkeypatch):
    """Stage 1 paused at a checkpoint, packed in pieces (cut small here), resumed elsewhere: the machine it moves
    to has neither stage 0's weights nor stage 1's start, and finishes stage 1 from its checkpoint."""
    module = curriculum_module
    monkeypatch.setattr(module, "PIECE", 20_000)  # several pieces, as a larger base's pack has
    two = module.load_curriculum(_write(tmp_path, [{"variant": "continue", "steps": 2},
                                                   {"variant": "mqar-small", "steps": 4}]))
    state = module.Curriculum(two, tmp_path / "a")
    state.advance(float("inf"), workers=0)
    stage1 = state.stage_dir(1)
    # as if the call had ended after step 2 of stage 1: its final model and later checkpoints gone
    from palimpsa.upgrade.train.layout import complete_checkpoints

    shutil.rmtree(stage1 / "final")
    for checkpoint in complete_checkpoints(stage1):
        shutil.rmtree(checkpoint)
    state.state = {"stage": 1, "done": state.state["done"][:1]}
    state.save()
    paused = tmp_path / "paused"
    shutil.copytree(stage1, paused)  # keep a copy to make the mid-stage checkpoint from
    recipe = yaml.safe_load((stage1 / "recipe.yaml").read_text())
    recipe["checkpoint"]["every"] = 2
    recipe["train"]["max_steps"] = 2  # a two-step run of stage 1's recipe leaves the checkpoint at step 2
    recipe["output_dir"] = str(tmp_path / "two-steps")
    (tmp_path / "two-steps.yaml").write_text(yaml.safe_dump(recipe))
    from palimpsa.upgrade.train.recipe import load_recipe
    from palimpsa.upgrade.train.trainer import Trainer

    Trainer(load_recipe(tmp_path / "two-steps.yaml"), log=lambda _line: None).train()
    shutil.rmtree(stage1)
    shutil.copytree(tmp_path / "two-steps", stage1, ignore=shutil.ignore_patterns("final"))
    (stage1 / "recipe.yaml").write_text((paused / "recipe.yaml").read_text())  # the stage's own recipe (4 steps)
    state.pack(tmp_path / "pack")
    names = _packed(tmp_path / "pack")
    assert len(list((tmp_path / "pack").glob("pack.tar.*"))) > 1 and "pack/stage" in names
    moved = module.Curriculum(two, tmp_path / "b")
    moved.unpack(tmp_path / "pack")
    # the checkpoint travelled whole: float32 weights, and Adam's second moments (bf16, in shards)
    from palimpsa.upgrade.train.layout import latest_checkpoint

    assert any(n.startswith("pack/stage/exp_avg_sq/model") for n in names)
    moments = [torch.load(latest_checkpoint(run) / "state" / "optimizer.bin", weights_only=False)["state"]
               for run in (stage1, moved.stage_dir(1))]
    assert moments[0].keys() == moments[1].keys()
    assert all(torch.equal(moments[0][i]["exp_avg_sq"].bfloat16().float(), moments[1][i]["exp_avg_sq"])
               for i in moments[0])
    moved.advance(float("inf"), workers=0)
    assert moved.finished
    rows = [r for r in moved.metrics() if "loss" in r and r["stage"] == 1]
    assert [r["step"] for r in rows] == [3, 4, 5, 6]  # steps 1-2 of stage 1 before the move, 3-4 after
    assert "resumed from" in (tmp_path / "b" / "stage-1.log").read_text()


def test_the_command_ships_the_base_and_refuses_bad_files(curriculum_module, tmp_path, monkeypatch):
    module = curriculum_module
    import pretrain_base

    monkeypatch.setattr(pretrain_base, "LENGTHS", [96, 192])
    path = _write(tmp_path, [{"variant": "continue", "steps": 2}, {"variant": "mqar-small", "steps": 2}])
    out = tmp_path / "base"
    assert module.main([str(path), "--run-dir", str(tmp_path / "run"), "--output", str(out), "--workers", "0",
                        "--samples", "2", "--device", "cpu", "--pack", str(tmp_path / "pack")]) == 0
    summary = json.loads((out / "training" / "summary.json").read_text())
    assert summary["steps"] == 4 and [s["variant"] for s in summary["stages"]] == ["continue", "mqar-small"]
    assert set(summary["bar"]["accuracy"]) == set(pretrain_base.TASKS)
    log = [json.loads(line) for line in (out / "training" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4]
    card = (out / "README.md").read_text()
    assert "pretrain_base_curriculum.py" in card and "continue for 2 steps, then mqar-small for 2 steps" in card
    # only a base that meets its bar is called the experiment's (a toy base of 4 steps does not)
    assert not summary["bar"]["met"] and "upgrade/assets/recall-base" not in card
    assert card.startswith("# recall-base: a 0.0M-parameter byte-level Mamba2, short of its recall bar\n\n"
                           "A candidate base for the long-context experiment")
    assert "It misses its recall bar (below), so no\nexperiment starts from it" in card
    assert json.loads((out / "config.json").read_text())["d_model"] == 32
    # a fresh machine given the finished curriculum's pack ships the same base
    again = tmp_path / "again"
    assert module.main([str(path), "--run-dir", str(tmp_path / "run-b"), "--output", str(again), "--workers", "0",
                        "--samples", "2", "--device", "cpu", "--unpack", str(tmp_path / "pack")]) == 0
    from safetensors.torch import load_file

    def shipped(folder):
        return {k: v for f in sorted(folder.glob("model*.safetensors")) for k, v in load_file(f).items()}

    first, second = shipped(out), shipped(again)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert json.loads((again / "training" / "summary.json").read_text())["steps"] == 4
    for stages, message in (([], "has no stages"), ([{"variant": "nope", "steps": 2}], "variant must be one of"),
                            ([{"variant": "continue", "steps": 0}], "steps must be a whole number"),
                            ([{"variant": "anneal", "steps": 50}], "an anneal needs >= 100 steps"),
                            ([{"variant": "continue", "steps": 200, "decay": 300}], "decay .* applies to an anneal"),
                            ([{"variant": "anneal", "steps": 200, "decay": 100}], "at least its steps")):
        with pytest.raises(SystemExit, match=message):
            module.load_curriculum(_write(tmp_path, stages, "bad.yaml"))

    # the same stages run elsewhere (as races), from the first base: a curriculum that starts from it ships their
    # result with its card, the stages' logs cut at the stages' steps
    grown = tmp_path / "grown.yaml"
    grown.write_text(yaml.safe_dump({"recipe": str(ROOT / "recipes" / "pretrain-base.yaml"), "overrides": TOY,
                                     "lr": 3e-3, "start": "base",
                                     "stages": [{"variant": "niah-multi", "steps": 2},
                                                {"variant": "multi-anneal", "steps": 150, "decay": 200}]}))
    logs = tmp_path / "logs"
    logs.mkdir()
    for index, last in enumerate((3, 160)):  # a race's run goes on past the checkpoint its next stage took
        (logs / f"stage-{index}-metrics.jsonl").write_text("".join(
            json.dumps({"step": k, "loss": 1.0, "tokens_per_s": 100.0, "tokens": 128 * k}) + "\n"
            for k in range(1, last + 1)))
    shipped_dir = tmp_path / "grown-base"
    assert module.main([str(grown), "--ship-model", str(tmp_path / "run" / "stage-1-mqar-small" / "final"),
                        "--logs", str(logs), "--output", str(shipped_dir), "--samples", "2", "--device", "cpu"]) == 0
    summary = json.loads((shipped_dir / "training" / "summary.json").read_text())
    assert summary["steps"] == 152 and summary["tokens"] == 152 * 128  # 2 x 64 tokens a step
    card = (shipped_dir / "README.md").read_text()
    assert f"Continued from `{tmp_path / 'base'}`" in card and "niah-multi for 2 steps, then multi-anneal" in card
    assert "run as races of `scripts/pretrain_base_variants.py`" in card
    log = [json.loads(line) for line in (shipped_dir / "training" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["stage"] == 0] == [1, 2] and len(log) == 152
    assert [r["step"] for r in log if r["stage"] == 1][:2] == [3, 4]  # the curriculum's running step, as run
    recipe = yaml.safe_load((shipped_dir / "training" / "recipe.yaml").read_text())
    assert recipe["schedule"]["total_steps"] == 200 and recipe["train"]["max_steps"] == 150
    assert recipe["model"]["path"] == "stage 0 (niah-multi)'s result"  # not the machine's path of the result
    # shipped again from the shipped folder on a machine without the GPU that measured the bar: the bar is reused
    recorded = json.loads((shipped_dir / "training" / "summary.json").read_text())
    recorded["device"] = "a GPU"
    (tmp_path / "recorded.json").write_text(json.dumps(recorded))
    assert module.main([str(grown), "--ship-model", str(shipped_dir), "--logs", str(logs), "--output",
                        str(tmp_path / "again-base"), "--bar", str(tmp_path / "recorded.json")]) == 0
    again_summary = json.loads((tmp_path / "again-base" / "training" / "summary.json").read_text())
    assert again_summary["bar"] == summary["bar"] and again_summary["device"] == "a GPU"
    assert all(torch.equal(shipped(tmp_path / "again-base")[k], first[k]) for k in first)
    with pytest.raises(SystemExit, match="ends at step 100, short of stage 1's 150 steps"):
        (logs / "stage-1-metrics.jsonl").write_text("".join(json.dumps({"step": k, "loss": 1.0}) + "\n"
                                                            for k in range(1, 101)))
        module.main([str(grown), "--ship-model", str(shipped_dir), "--logs", str(logs), "--output",
                     str(tmp_path / "x"), "--device", "cpu"])
    assert shipped(shipped_dir).keys() == first.keys() and all(
        torch.equal(shipped(shipped_dir)[k], first[k]) for k in first)  # the model it was given, as it was
    with pytest.raises(SystemExit, match="has no stage-1-metrics.jsonl"):
        (logs / "stage-1-metrics.jsonl").unlink()
        module.main([str(grown), "--ship-model", str(shipped_dir), "--logs", str(logs), "--output",
                     str(tmp_path / "x"), "--device", "cpu"])
    with pytest.raises(SystemExit, match="start nowhere of .* holds no config.json"):
        grown.write_text(grown.read_text().replace("start: base", "start: nowhere"))
        module.load_curriculum(grown)


def test_a_stage_that_cannot_end_in_the_call_waits_for_the_next(curriculum_module, tmp_path, capsys):
    """Packs between stages are small and mid-stage ones are not: a stage starts only when the slowest rate so far
    says it ends before the deadline."""
    import time

    module = curriculum_module
    two = module.load_curriculum(_write(tmp_path, [{"variant": "continue", "steps": 2},
                                                   {"variant": "mqar-small", "steps": 4}]))
    state = module.Curriculum(two, tmp_path / "run")
    assert state.estimate(0) == 0.0  # nothing measured: the first stage is tried
    state.state = {"stage": 1, "done": [{"stage": 0, "variant": "continue", "steps": 2, "train_seconds": 100.0,
                                         "tokens": 256}]}
    assert state.estimate(1) == pytest.approx(4 * 50 * 1.05 + 120)  # no log: the mean rate, 2 minutes
    state.advance(time.monotonic() + 60, workers=0)
    assert state.state["stage"] == 1 and not state.stage_dir(1).exists()
    assert "stage 1 needs about 5.5 min, more than is left; it starts in the next call" in capsys.readouterr().out


def test_the_estimate_splits_a_stage_into_its_overhead_and_its_steady_rate(curriculum_module, tmp_path,
                                                                          monkeypatch):
    """A stage's first logged window holds the process's start (kernels compiled, workers started): costing every
    step at the stage's mean rate would count that start once per step and keep stages out of calls they fit. The
    overhead is the largest measured, or the newest when a kernel cache is kept."""
    module = curriculum_module
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    three = module.load_curriculum(_write(tmp_path, [{"variant": "continue", "steps": 400},
                                                     {"variant": "mqar-small", "steps": 400},
                                                     {"variant": "continue", "steps": 1000}]))
    state = module.Curriculum(three, tmp_path / "run")
    state.run_dir.mkdir(parents=True)

    def log(index, first_seconds, rate):  # 100 tokens a step, windows of 100 steps; the first took first_seconds
        rows = [{"step": 100, "tokens": 100, "tokens_per_s": 100 * 100 / first_seconds}]
        rows += [{"step": step, "tokens": 100, "tokens_per_s": rate} for step in (200, 300, 400)]
        rows.append({"step": 400, "eval_nll": 1.0})
        (state.run_dir / f"stage-{index}-metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    log(0, 60.0, 1000.0)  # steady 0.1 s a step; the first 100 steps took 50 s more than that
    state.state = {"stage": 1, "done": [{"stage": 0, "variant": "continue", "steps": 400, "train_seconds": 90.0,
                                         "tokens": 40000}]}
    # no wall time recorded: the first window's excess plus a minute for the process outside the windows
    assert state.estimate(2) == pytest.approx(1000 * 0.1 * 1.05 + 50 + 60)
    state.state["done"][0]["wall_seconds"] = 150.0  # 400 steps at 0.1 s: 110 s of the stage were overhead
    assert state.estimate(2) == pytest.approx(1000 * 0.1 * 1.05 + 110)

    log(1, 15.0, 2000.0)  # a faster stage that started from a warm cache: wall 60 s, 20 s of steps at 0.05 s
    state.state["done"].append({"stage": 1, "variant": "mqar-small", "steps": 400, "train_seconds": 30.0,
                                "tokens": 40000, "wall_seconds": 60.0})
    assert state.estimate(2) == pytest.approx(1000 * 0.1 * 1.05 + 110)  # overhead: the largest
    # the rate is the slowest of the stage's own variant when one is done: the slow stage 0 was "continue"
    state.curriculum["stages"][2]["variant"] = "mqar-small"
    assert state.estimate(2) == pytest.approx(1000 * 0.05 * 1.05 + 110)
    state.curriculum["stages"][2]["variant"] = "continue"
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert state.estimate(2) == pytest.approx(1000 * 0.1 * 1.05 + 110)  # named but empty: a cold start
    cache.mkdir()
    (cache / "kernel.bin").write_bytes(b"x")
    assert state.estimate(2) == pytest.approx(1000 * 0.1 * 1.05 + 40)  # a kept cache: the newest overhead


def test_a_command_past_its_deadline_is_not_started(curriculum_module, tmp_path):
    """``pretrain_base.run_until``: a deadline already passed returns None (stopped) without starting the command,
    whose interrupt could otherwise land while it starts and be lost; before it, the command runs to its end."""
    import time

    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    assert curriculum_module.pretrain_base.run_until(command, time.monotonic() - 1) is None
    assert not marker.exists()
    assert curriculum_module.pretrain_base.run_until(command, time.monotonic() + 60) == 0
    assert marker.exists()
