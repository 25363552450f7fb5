"""Pretrain the long-context base through a curriculum of stages, in pieces that fit device calls; then check its
recall bar and ship it (as scripts/pretrain_base.py does for one recipe).

    python scripts/pretrain_base_curriculum.py recipes/curricula/base-13m.yaml --minutes 9 \\
        --pack runs/pack --unpack runs/pack        # call again until it says the base is written

The races of 2026-11-24 (docs/bench/pretrain-base-2026-11-24/curriculum/) found that the base's recall tasks do
not emerge from one mixture: MQAR starts only in a phase of easy MQAR alone, NIAH in the FwPKM form only in a phase
of easy NIAH alone, and an annealed rate at the end lifts repeat-after-gap. A curriculum file names the stages:

    recipe: pretrain-base.yaml              # the base recipe (relative to this file)
    overrides: [model.scratch.d_model=512]  # for every stage (KEY=VALUE, as on the finetune-model command line)
    lr: 1.0e-3                              # every stage's constant rate unless it gives its own
    stages:
      - {variant: continue, steps: 9000, lr: 2.0e-3, warmup: 300}   # the mixture, from scratch
      - {variant: mqar-small, steps: 1000}                           # then from the stage before, fresh AdamW
      - {variant: anneal, steps: 1200}                               # cosine to 2% over its steps
      - {variant: multi-anneal, steps: 1500, decay: 1800}            # a cosine over 1800 steps, cut at 1500

A stage's ``variant`` is one of pretrain_base_variants.py's (``continue`` is the recipe's mixture). The first stage
starts from scratch, or from the model directory ``start:`` names (relative to the file); every later one from the
stage before's final weights with a fresh optimizer, its rate held constant after ``warmup`` steps (100 by
default), except ``anneal`` and ``multi-anneal``, whose rate decays along a cosine over its steps (or over
``decay`` steps, stopping part way). A stage cut by
``--minutes`` resumes from its last checkpoint (every 250 steps). ``--pack DIR`` writes where the curriculum stands
in a form that a device call returns (the stage's checkpoint as pretrain_base.py packs it, the stages done, their
logs); ``--unpack DIR`` goes on from it on a fresh machine.

When the stages ran as races instead (``pretrain_base_variants.py``, a staged variant per call, each from the last
call's kept best), ``--ship-model DIR --logs LOGS`` checks the result's bar and ships it with this file's card, the
stages' logs read from ``LOGS/stage-N-metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pretrain_base  # noqa: E402  (the scripts folder is not a package)
import pretrain_base_variants  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STATE = "curriculum.json"
PIECE = 15 * 10**6  # bytes of one piece of a pack


def load_curriculum(path: Path, need_start: bool = True) -> dict:
    """The curriculum file, checked: every stage names a known variant and a positive number of steps, and its start
    (when it has one and ``need_start``: shipping a result trained elsewhere names it only) is a model directory."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SystemExit(f"pretrain_base_curriculum: cannot read {path}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list) or not data["stages"]:
        raise SystemExit(f"pretrain_base_curriculum: {path} has no stages; give a list under 'stages'")
    known = pretrain_base_variants.MQAR_VARIANTS
    for index, stage in enumerate(data["stages"]):
        if not isinstance(stage, dict) or stage.get("variant") not in known:
            raise SystemExit(f"pretrain_base_curriculum: stage {index} of {path}: variant must be one of "
                             f"{', '.join(known)}")
        steps = stage.get("steps")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise SystemExit(f"pretrain_base_curriculum: stage {index} of {path}: steps must be a whole number >= 1")
        decay = stage.get("decay")
        if decay is not None and (stage["variant"] not in pretrain_base_variants.ANNEALS or not isinstance(decay, int)
                                  or decay < steps):
            raise SystemExit(f"pretrain_base_curriculum: stage {index} of {path}: decay (the cosine's length) applies "
                             "to an anneal and is a whole number of at least its steps")
        if stage["variant"] in pretrain_base_variants.ANNEALS and steps < 100:
            raise SystemExit(f"pretrain_base_curriculum: stage {index} of {path}: an anneal needs >= 100 steps")
    if data.get("start") is not None:  # go on from a model directory instead of starting from scratch
        start = (path.parent / str(data["start"])).resolve()
        if need_start and not (start / "config.json").is_file():
            raise SystemExit(f"pretrain_base_curriculum: start {data['start']} of {path} holds no config.json; "
                             "give a model directory (relative to the curriculum file)")
        data["start"] = str(start)
    data["recipe"] = str((path.parent / data.get("recipe", "pretrain-base.yaml")).resolve())
    data.setdefault("overrides", [])
    data.setdefault("lr", 1e-3)
    return data


def stage_recipe(curriculum: dict, index: int, init: Path | None, workers: int) -> dict:
    """The recipe of stage ``index``: the base recipe with the curriculum's overrides, the stage's variant, steps,
    rate and warmup; from ``init`` (a model directory: the stage before's result, or for the first the
    curriculum's ``start``; None for a first stage from scratch)."""
    from palimpsa.upgrade.train.recipe import load_recipe

    stage = curriculum["stages"][index]
    base = load_recipe(Path(curriculum["recipe"]), list(curriculum["overrides"])).model_dump(mode="json")
    lr = float(stage.get("lr", curriculum["lr"]))
    recipe = pretrain_base_variants.variant_recipe(base, stage["variant"], workers, init, lr,
                                                   anneal_steps=max(100, stage["steps"]))
    recipe["train"]["max_steps"] = stage["steps"]
    if "decay" in stage:  # a cosine longer than the stage: it stopped part way along (a race cut at its deadline)
        recipe["schedule"]["total_steps"] = stage["decay"]
    # data.seed stays the recipe's in every stage: it also picks the held-out files of the eval NLL, which must
    # stay held out; a later stage of the same data replays the first one's documents (the races did too)
    if stage["variant"] not in pretrain_base_variants.ANNEALS:
        recipe["optim"]["lr"] = lr
        recipe["schedule"] = {"type": "constant", "warmup_steps": int(stage.get("warmup", 100 if init else 300))}
    return recipe


class Curriculum:
    """Where a curriculum stands in ``run_dir``: ``curriculum.json`` (the stage under way, the stages done and
    their summaries) and one run folder per stage (``stage-N-variant``)."""

    def __init__(self, curriculum: dict, run_dir: Path):
        self.curriculum, self.run_dir = curriculum, run_dir
        path = run_dir / STATE
        self.state = json.loads(path.read_text()) if path.is_file() else {"stage": 0, "done": []}

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / STATE).write_text(json.dumps(self.state, indent=2) + "\n")

    def stage_dir(self, index: int) -> Path:
        return self.run_dir / f"stage-{index}-{self.curriculum['stages'][index]['variant']}"

    @property
    def finished(self) -> bool:
        return self.state["stage"] >= len(self.curriculum["stages"])

    def init_of(self, index: int) -> Path | None:
        """The weights stage ``index`` starts from: the stage before's final model directory (on a fresh machine,
        rebuilt there by ``unpack``)."""
        if index == 0:
            return Path(self.curriculum["start"]) if self.curriculum.get("start") else None
        before = self.stage_dir(index - 1)
        if (before / "final" / "config.json").is_file():
            return before / "final"
        raise SystemExit(f"pretrain_base_curriculum: stage {index - 1}'s weights are missing from {self.run_dir}; "
                         "--unpack the folder that the last call packed")

    def advance(self, deadline: float, workers: int) -> None:
        """Train stage after stage until the curriculum ends or the deadline passes."""
        from palimpsa.upgrade.train.layout import latest_checkpoint

        self.save()
        while not self.finished and time.monotonic() < deadline:
            index = self.state["stage"]
            run = self.stage_dir(index)
            needs = self.estimate(index)
            if latest_checkpoint(run) is None and needs > deadline - time.monotonic():
                # a stage that cannot end in this call starts in the next: packs between stages are small
                print(f"pretrain_base_curriculum: stage {index} needs about {needs / 60:.1f} min, more than is "
                      "left; it starts in the next call", flush=True)
                return
            recipe_path = self.run_dir / f"stage-{index}.yaml"
            recipe_path.write_text(yaml.safe_dump(stage_recipe(self.curriculum, index, self.init_of(index), workers),
                                                  sort_keys=False))
            command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(recipe_path),
                       f"output_dir={run}"]
            if (run / "recipe.yaml").is_file() and latest_checkpoint(run) is not None:
                _reconcile(run, recipe_path)
                command.append("--resume")
            stage = self.curriculum["stages"][index]
            print(f"pretrain_base_curriculum: stage {index} ({stage['variant']}, {stage['steps']} steps)"
                  + (" resumed" if "--resume" in command else ""), flush=True)
            began = time.monotonic()
            with open(self.run_dir / f"stage-{index}.log", "a") as log:
                pretrain_base.run_until(command, deadline, log)
            wall = time.monotonic() - began
            if not (run / "final" / "config.json").is_file():
                checkpoint = latest_checkpoint(run)
                step = json.loads((checkpoint / "trainer_state.json").read_text())["step"] if checkpoint else 0
                if time.monotonic() < deadline:
                    tail = (self.run_dir / f"stage-{index}.log").read_text(errors="replace").strip().splitlines()[-3:]
                    raise SystemExit(f"pretrain_base_curriculum: stage {index} stopped at step {step} before its "
                                     "end; " + " / ".join(tail))
                print(f"pretrain_base_curriculum: stage {index} paused at step {step}; call again to go on",
                      flush=True)
                return
            rows = self._rows(index) or []
            self.state["done"].append({"stage": index, "variant": stage["variant"], "steps": stage["steps"],
                                       "train_seconds": sum(pretrain_base._seconds(rows)),
                                       "tokens": stage["steps"] * _tokens_per_step(
                                           yaml.safe_load((run / "recipe.yaml").read_text())),
                                       # the process from start to end, when it ran in one piece
                                       **({} if "--resume" in command else {"wall_seconds": wall})})
            self.state["stage"] = index + 1
            self.save()

    def estimate(self, index: int) -> float:
        """Seconds stage ``index`` is expected to take (0 before any stage has run: the first is tried): its steps
        at the steady rate (the logged windows after the first, evaluations and checkpoints included) of the
        slowest done stage of its variant, or of any when none of its variant is done (the variants' data differ
        in cost: easy MQAR's ran at 190K tokens/s against the mixture's 290K), 5% on top as a margin, plus a
        stage's overhead: everything outside those steps (the process's start with its kernel compilation and data
        workers, its end with the last evaluation and save), the stage's wall time less its steps at its rate.
        The overhead is the largest measured unless a kernel cache is kept (``TRITON_CACHE_DIR`` names a folder
        with files), when it is the newest: a start with a warm cache took ~25 s against ~110 s cold on an H100.
        A stage done without its log, or resumed, is costed from what it has (its mean rate; its first window's
        excess plus a minute; 2 minutes)."""
        overheads, rates, same = [], [], []
        variant = self.curriculum["stages"][index]["variant"]
        for done in self.state["done"]:
            if not (done["steps"] and done["train_seconds"]):
                continue
            windows = self._windows(done["stage"])
            if len(windows) >= 3:
                steady = sum(seconds for _, seconds in windows[1:]) / sum(steps for steps, _ in windows[1:])
                rates.append(steady)
                if done.get("wall_seconds"):
                    overheads.append(max(0.0, done["wall_seconds"] - done["steps"] * steady))
                else:  # the first window holds the start; the process before its first step and its end: a minute
                    first_steps, first_seconds = windows[0]
                    overheads.append(max(0.0, first_seconds - first_steps * steady) + 60)
            else:
                rates.append(done["train_seconds"] / done["steps"])
                overheads.append(120.0)
            if done["variant"] == variant:
                same.append(rates[-1])
        if not rates:
            return 0.0
        cache = os.environ.get("TRITON_CACHE_DIR")
        warm = bool(cache) and Path(cache).is_dir() and any(Path(cache).iterdir())
        overhead = overheads[-1] if warm else max(overheads)
        return self.curriculum["stages"][index]["steps"] * max(same or rates) * 1.05 + overhead

    def _windows(self, index: int) -> list[tuple[int, float]]:
        """(steps, seconds) of each logged training window of stage ``index``."""
        return pretrain_base.windows(self._rows(index) or [])

    def _rows(self, index: int) -> list[dict] | None:
        """Stage ``index``'s log rows: its run's while it is here, else the copy a pack brought; None if neither."""
        source = self.stage_dir(index) / "metrics.jsonl"
        if not source.is_file():
            source = self.run_dir / f"stage-{index}-metrics.jsonl"
        if not source.is_file():
            return None
        return [json.loads(line) for line in source.read_text().splitlines() if line.strip()]

    def metrics(self) -> list[dict]:
        """Every stage's log rows, with ``stage`` and the curriculum's running ``step``."""
        stages = self.curriculum["stages"]
        return _running_log([self._rows(index) for index in range(min(self.state["stage"] + 1, len(stages)))],
                            stages)

    def pack(self, target: Path) -> None:
        """The curriculum's state, the finished stages' logs, and the stage under way (its newest checkpoint, or,
        before it has one, the weights it starts from), as ``target/pack.tar.NNN``: one tar cut into pieces of at
        most 15 MB, the most a device call returns in one file (a 13.9M base's pack is about 85 MB)."""
        import tarfile
        import tempfile

        with tempfile.TemporaryDirectory(dir=self.run_dir) as scratch:
            folder = Path(scratch) / "pack"
            self._pack_into(folder)
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            whole = Path(scratch) / "pack.tar"
            with tarfile.open(whole, "w") as tar:
                tar.add(folder, arcname="pack")
            with open(whole, "rb") as source:
                for number in range(1000):
                    piece = source.read(PIECE)
                    if not piece:
                        break
                    (staging / f"pack.tar.{number:03d}").write_bytes(piece)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        count = len(list(target.glob("pack.tar.*")))
        print(f"pretrain_base_curriculum: packed stage {self.state['stage']} of {len(self.curriculum['stages'])} "
              f"into {target} ({count} pieces)", flush=True)

    def _pack_into(self, folder: Path) -> None:
        from palimpsa.upgrade.train.layout import latest_checkpoint

        folder.mkdir(parents=True)
        (folder / STATE).write_text(json.dumps(self.state, indent=2) + "\n")
        for index in range(len(self.curriculum["stages"])):
            metrics = self.stage_dir(index) / "metrics.jsonl"
            if metrics.is_file() and index < self.state["stage"]:
                shutil.copy2(metrics, folder / f"stage-{index}-metrics.jsonl")
            elif (self.run_dir / f"stage-{index}-metrics.jsonl").is_file():
                shutil.copy2(self.run_dir / f"stage-{index}-metrics.jsonl", folder)
        index = self.state["stage"]
        if self.finished:  # the base: its weights (shipped in bf16 anyway) and the last stage's recipe
            last = self.stage_dir(index - 1)
            pretrain_base.write_shards(pretrain_base.packed_weights(last / "final"), folder / "final", bf16=True)
            shutil.copy2(last / "recipe.yaml", folder / "final" / "recipe.yaml")
        elif latest_checkpoint(self.stage_dir(index)) is not None:
            # mid-stage: the float32 weights and Adam's second moments, 6 bytes a parameter (a 5.8M base's 35 MB
            # fits a device call beside the repository; a 13.9M base's 84 MB does not: end its calls at a stage)
            pretrain_base.pack(self.stage_dir(index), folder / "stage")
        elif index > 0:  # between stages: the next starts with a fresh optimizer from these weights, in bf16
            pretrain_base.write_shards(pretrain_base.packed_weights(self.init_of(index)), folder / "init",
                                       bf16=True)


    def scratch_recipe(self) -> Path:
        """The first stage's recipe (the model's dimensions), written where the run keeps it."""
        path = self.run_dir / "stage-0.yaml"
        if not path.is_file():
            path.write_text(yaml.safe_dump(stage_recipe(self.curriculum, 0, None, 1), sort_keys=False))
        return path

    def unpack(self, source: Path) -> None:
        """Go on from what ``pack`` wrote to ``source`` (a fresh machine): the state, the logs, and the stage's
        checkpoint or the weights it starts from."""
        import tarfile
        import tempfile

        pieces = sorted(source.glob("pack.tar.*"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.run_dir) as scratch:
            whole = Path(scratch) / "pack.tar"
            with open(whole, "wb") as out:
                for piece in pieces:
                    out.write(piece.read_bytes())
            with tarfile.open(whole) as tar:
                tar.extractall(scratch, filter="data")
            self._unpack_from(Path(scratch) / "pack")

    def _unpack_from(self, folder: Path) -> None:
        self.state = json.loads((folder / STATE).read_text())
        self.save()
        for metrics in folder.glob("stage-*-metrics.jsonl"):
            shutil.copy2(metrics, self.run_dir / metrics.name)
        index = self.state["stage"]
        if (folder / "final").is_dir():
            last = self.stage_dir(index - 1)
            pretrain_base.model_from_pack(folder / "final", last / "final", self.scratch_recipe())
            shutil.copy2(folder / "final" / "recipe.yaml", last / "recipe.yaml")
        elif (folder / "stage").is_dir():
            pretrain_base.unpack(folder / "stage", self.stage_dir(index))
            if index > 0:  # the stage's recipe names the weights it started from: its checkpoint's stand in for
                # them (the resumed run loads the checkpoint's weights over whatever it starts from)
                pretrain_base.model_from_pack(folder / "stage", self.stage_dir(index - 1) / "final",
                                              self.scratch_recipe())
        elif (folder / "init").is_dir():
            pretrain_base.model_from_pack(folder / "init", self.stage_dir(index - 1) / "final",
                                          self.scratch_recipe())
        print(f"pretrain_base_curriculum: unpacked {folder} (stage {index})", flush=True)


def _reconcile(run: Path, recipe_path: Path) -> None:
    """A stage resumed on another machine: its saved recipe names that machine's paths (the run folder, the
    weights it started from) and data workers. Those may differ and are taken from here; anything else differing
    means the curriculum changed under the stage, which is refused."""
    from palimpsa.upgrade.train.recipe import load_recipe

    here = load_recipe(recipe_path, [f"output_dir={run}"])
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    try:  # a recipe saved before a field was added: compared with the field's default, as the trainer does
        saved = type(here).model_validate(saved).model_dump(mode="json")
    except ValueError:
        pass
    mine = here.model_dump(mode="json")

    def comparable(recipe: dict) -> dict:
        recipe = json.loads(json.dumps(recipe))
        recipe.pop("output_dir", None)
        recipe.get("model", {}).pop("path", None)
        recipe.get("data", {}).pop("workers", None)
        return recipe

    a, b = comparable(mine), comparable(saved)
    if a != b:
        differs = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        raise SystemExit(f"pretrain_base_curriculum: the curriculum changed under the stage in {run} ({differs}); "
                         "restore the curriculum file, or start a new --run-dir")
    (run / "recipe.yaml").write_text(here.to_yaml())


def _tokens_per_step(recipe: dict) -> int:
    return recipe["data"]["batch_size"] * recipe["data"]["seq_len"] * recipe["train"].get("grad_accum", 1)


def _running_log(stage_logs: list[list[dict] | None], stages: list[dict]) -> list[dict]:
    """The stages' log rows as one log, each row with its ``stage`` and the curriculum's running ``step`` (a stage
    without a log adds no rows)."""
    rows, offset = [], 0
    for index, stage_rows in enumerate(stage_logs):
        if stage_rows is None:
            continue
        rows += [{**row, "stage": index, "step": offset + row["step"]} for row in stage_rows]
        offset += stages[index]["steps"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("curriculum", type=Path, help="the curriculum file (see below)")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "pretrain-base-curriculum")
    parser.add_argument("--output", type=Path, default=ROOT / "upgrade" / "assets" / "recall-base")
    parser.add_argument("--minutes", type=float, default=9.0, help="training time this call (default 9)")
    parser.add_argument("--workers", type=int, default=3, help="data.workers of every stage (default 3)")
    parser.add_argument("--samples", type=int, default=40, help="prompts per task and length for the bar")
    parser.add_argument("--device", default=None, help="default: cuda when available")
    parser.add_argument("--pack", type=Path, default=None, metavar="DIR", help="after training, write where the "
                        "curriculum stands to DIR in a form a device call returns")
    parser.add_argument("--unpack", type=Path, default=None, metavar="DIR",
                        help="first go on from DIR (written by --pack) when the run folder holds nothing yet")
    parser.add_argument("--plan", action="store_true", help="print the stages and where the curriculum stands")
    parser.add_argument("--ship-model", type=Path, default=None, metavar="DIR",
                        help="train nothing: DIR is this curriculum's result, its stages run elsewhere (races of "
                        "pretrain_base_variants.py, one per stage or staged); check its bar and ship it, the "
                        "stages' logs read from --logs")
    parser.add_argument("--bar", type=Path, default=None, metavar="SUMMARY",
                        help="with --ship-model: take the bar from SUMMARY (training/summary.json of an earlier ship "
                        "of the same weights) instead of measuring it again, e.g. to re-ship on a CPU")
    parser.add_argument("--logs", type=Path, default=None, metavar="DIR",
                        help="with --ship-model: the stages' training logs, stage-N-metrics.jsonl (rows past the "
                        "stage's steps are left out: a race's run goes on past the checkpoint that its next stage "
                        "starts from)")
    args = parser.parse_args(argv)
    if (args.ship_model is None) != (args.logs is None):
        parser.error("--ship-model and --logs go together")
    if args.bar is not None and (args.ship_model is None or not args.bar.is_file()):
        parser.error("--bar SUMMARY goes with --ship-model and names a summary.json that an earlier ship wrote")
    curriculum = load_curriculum(args.curriculum, need_start=args.ship_model is None)
    if args.ship_model is not None:
        return ship_model(curriculum, args)
    state = Curriculum(curriculum, args.run_dir)
    if args.unpack and not (args.run_dir / STATE).is_file():
        if list(args.unpack.glob("pack.tar.*")):
            state.unpack(args.unpack)
        else:
            print(f"pretrain_base_curriculum: {args.unpack} holds no packed curriculum; starting afresh", flush=True)
    stages = curriculum["stages"]
    print(f"pretrain_base_curriculum: {len(stages)} stages, " + " -> ".join(
        f"{s['variant']} ({s['steps']})" for s in stages) + f"; at stage {state.state['stage']}", flush=True)
    if args.plan:
        return 0
    started = time.perf_counter()
    state.save()
    state.advance(time.monotonic() + 60 * args.minutes, args.workers)
    if args.pack:
        state.pack(args.pack)
    if not state.finished:
        return 0
    last = state.stage_dir(len(stages) - 1)
    rows = state.metrics()
    log = args.run_dir / "metrics.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ship_base(curriculum, last / "final", state.state["done"], log, last / "recipe.yaml", args, started)
    return 0


def ship_base(curriculum: dict, model_dir: Path, done: list[dict], log: Path, recipe: Path, args,
              started: float, how: str = "by `scripts/pretrain_base_curriculum.py`") -> None:
    """Check the bar of the curriculum's result (or take the one ``--bar`` recorded for it) and ship it with its
    card, the stages in ``done``."""
    import torch
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    where = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    if args.bar is not None:  # measured before, on these weights (often on a GPU)
        recorded = json.loads(args.bar.read_text())
        report, where = recorded["bar"], recorded.get("device", where)
        print(f"pretrain_base_curriculum: the bar as {args.bar} recorded it (measured on {where})", flush=True)
    else:
        report = pretrain_base.evaluate_bar(model_dir, args.samples, device)
    print(pretrain_base.bar_table(report), flush=True)
    model, _ = load_model_and_tokenizer(model_dir, need_tokenizer=False)
    tokens = sum(d["tokens"] for d in done)
    config = json.loads((model_dir / "config.json").read_text())
    shown = {k: v for k, v in curriculum.items() if k != "recipe"}
    if curriculum.get("start"):
        shown["start"] = _shown(Path(curriculum["start"]))
    origin = f"Continued from `{shown['start']}`" if curriculum.get("start") else "Pretrained from scratch"
    summary = {"steps": sum(d["steps"] for d in done), "tokens": tokens,
               "train_seconds": sum(d["train_seconds"] for d in done),
               "parameters": sum(p.numel() for p in model.parameters()), "padded_vocab": config["vocab_size"],
               "device": where, "stages": done, "curriculum": shown,
               "training": f"{origin} {how} ({args.curriculum.name}): "
               f"{len(done)} stages, " + ", then ".join(f"{d['variant']} for {d['steps']} steps" for d in done)
               + f" ({tokens / 1e9:.2f}B tokens in all); each stage after the first from the one before with a "
               "fresh AdamW; byte-level documents of `recipes/pretrain-base.yaml`'s mixture (a third the standard "
               "library's source, two thirds synthetic recall) or the stage's variant of it; bf16; "
               f"{sum(d['train_seconds'] for d in done) / 60:.1f} minutes of training."}
    pretrain_base.ship(model_dir, args.output, report, summary, log, recipe)
    print(f"pretrain_base_curriculum: wrote {args.output} (bar {'met' if report['met'] else 'NOT met'}) in "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def ship_model(curriculum: dict, args) -> int:
    """``--ship-model``: the stages ran elsewhere; their logs stand for the curriculum's record."""
    import tempfile

    started = time.perf_counter()
    model_dir = args.ship_model
    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"pretrain_base_curriculum: --ship-model {model_dir} holds no config.json; give a model "
                         "directory")
    done, logs = [], []
    stages = curriculum["stages"]
    for index, stage in enumerate(stages):
        path = args.logs / f"stage-{index}-metrics.jsonl"
        if not path.is_file():
            raise SystemExit(f"pretrain_base_curriculum: --logs {args.logs} has no {path.name}; give every "
                             "stage's training log")
        stage_rows = [row for row in (json.loads(line) for line in path.read_text().splitlines() if line.strip())
                      if row.get("step", 0) <= stage["steps"]]
        # as the stage ran: from the start (or scratch) first, then from the stage before's result (named below)
        init = (Path(curriculum["start"]) if curriculum.get("start") else None) if index == 0 else ROOT
        recipe = stage_recipe(curriculum, index, init, args.workers)
        last = max((row.get("step", 0) for row in stage_rows), default=0)
        if last <= stage["steps"] - recipe["train"]["log_every"]:
            raise SystemExit(f"pretrain_base_curriculum: {path} ends at step {last}, short of stage {index}'s "
                             f"{stage['steps']} steps; give the log of the run that made them")
        done.append({"stage": index, "variant": stage["variant"], "steps": stage["steps"],
                     "train_seconds": sum(pretrain_base._seconds(stage_rows)),
                     "tokens": stage["steps"] * _tokens_per_step(recipe)})
        logs.append(stage_rows)
    rows = _running_log(logs, stages)
    # the last stage's recipe, as a record: where it started, not a path on the machine that ran it
    if "path" in recipe["model"]:
        recipe["model"]["path"] = (f"stage {len(stages) - 2} ({stages[-2]['variant']})'s result" if len(stages) > 1
                                   else _shown(Path(curriculum["start"])))
    with tempfile.TemporaryDirectory() as scratch:
        log, recipe_path = Path(scratch) / "metrics.jsonl", Path(scratch) / "recipe.yaml"
        log.write_text("".join(json.dumps(row) + "\n" for row in rows))
        recipe_path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        ship_base(curriculum, model_dir, done, log, recipe_path, args, started,
                  how="by the stages of `scripts/pretrain_base_curriculum.py`, run as races of "
                  "`scripts/pretrain_base_variants.py` and shipped with `--ship-model`")
    return 0


def _shown(path: Path) -> str:
    """A path as the card shows it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
