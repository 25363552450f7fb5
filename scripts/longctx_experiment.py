"""Does metaplasticity help long-context recall? The protocol of docs/results/longctx-protocol.md, run in pieces.

    python scripts/longctx_experiment.py plan                      # the pieces, which are done, the next ones
    python scripts/longctx_experiment.py run --minutes 9           # do pieces until 9 minutes are spent; again
    python scripts/longctx_experiment.py report                    # docs/results/longctx.md, .json and plots

Every piece is one fine-tune, one evaluation or one importance probe. ``run`` takes the next pieces in the
protocol's order and writes each result to the ledger (``--work``/ledger.json, with the per-prompt scores in
``--work``/records/) as it lands. The ledger is small and meant to be committed: a device call starts from the
repository and returns the ledger, so the experiment spreads over as many 10-minute calls and sessions as it needs.
A fine-tuned model lives in ``--scratch`` only until its evaluations have landed (they run right after it, in the
same call, or in the next call when the machine was kept warm: ``--scratch`` is git-ignored and stays; on a fresh
machine the model trains again, seeded, to the same weights). A piece is started only when the time left fits it
with its evaluations (a call's first piece on a fresh machine at the slowest time of its kind so far, which includes
compiling Triton's kernels; later ones, and every piece on a machine where an earlier call landed one, at the
median), and a fine-tune cut by the deadline starts over in the next call. On a GPU the next fine-tune trains beside
the evaluations (``--overlap``, the default there): a fine-tune then starts when its own time fits, and its
evaluations follow in the same call or the next one on a machine kept warm. On an H100 a fine-tune and a test
evaluation took 196-227 s side by side instead of 300-370 s one after the other (2026-11-25). Unpack each call's
ledger before the next call: one that starts from an older ledger finds the models of the pieces it lacks and
evaluates them again (the evaluations are deterministic: the same per-prompt records; the ledger keeps no time for
such a model).

On a lent GPU, one call (the ledger returns as one file, written again every 15 s so that a call stopped by its
time limit still returns what landed; unpack it over the repository and commit it). The tracked files are about
67 MiB and a call carries 64: delete the 13.9M start weights from the working tree first, ``rm -r
docs/bench/pretrain-base-13m-2026-11-24/weights`` (git keeps them; the experiment reads the base in
``upgrade/assets/recall-base``). A returned file holds at most 16 MiB, and an experiment call's cache is about
25 MB: split it (``split -b 15M``) or keep carrying the one you have. The GPU image (Python 3.12) has every
dependency but pydantic: carry its wheels, fetched here with ``pip download pydantic --only-binary=:all:
--python-version 3.12 --platform manylinux2014_x86_64 -d .whl`` (``.whl`` is git-ignored), and install them first;
the package itself is imported from the working tree through a folder of links.

    site=$(mktemp -d); mkdir $site/palimpsa; touch $site/palimpsa/__init__.py; export PYTHONPATH=$site
    ln -s $PWD/upgrade $site/palimpsa/upgrade; ln -s $PWD/kernels $site/palimpsa/kernels
    python3 -m pip install --no-index --no-deps .whl/pydantic*.whl .whl/annotated_types*.whl \\
        .whl/typing_inspection*.whl
    tar xzf triton-cache.tgz 2>/dev/null; export TRITON_CACHE_DIR=$PWD/.triton-cache TRITON_CACHE_AUTOTUNING=1
    ( while sleep 15; do tar czf $OUT/partial.tgz docs/results/longctx-runs \\
        && mv $OUT/partial.tgz $OUT/longctx-runs.tgz; done ) &
    python scripts/longctx_experiment.py run --minutes 9; kill %1
    tar czf $OUT/longctx-runs.tgz docs/results/longctx-runs    # after the run: what landed, after a failure too

Triton's kernel cache, carried into the call as ``triton-cache.tgz`` (git ignores it), cuts the start of a call's
first process from about 110 s to 25 s on an H100 when it holds the call's kernels (measured on the base's
pretraining stages, docs/bench/pretrain-base-13m-2026-11-24); TRITON_CACHE_AUTOTUNING keeps the tuned
configurations of autotuned kernels (mamba_ssm's) in it too. The pretraining's cache lacks the experiment's
kernels: on a fresh H100 a control fine-tune took 200-207 s and a test evaluation 230 s, on a machine kept warm
from the call before 103-116 s and 162-204 s (2026-11-24). A cache grown by the experiment's calls (26 MB: carry
it after deleting ``upgrade/assets/tiny-mamba2/pytorch_model.bin`` from the working tree as well) brought a fresh
machine's treatment fine-tune to 192 s and its test evaluation to 199 s.

The order: the base's test evaluation; the primary pair (the control, then the treatment): each one's
learning-rate grid at seed 0 with validation recall (extended by a factor 3 beyond an end until the chosen rate is
inside; the treatment's grid waits for the control's choice, whose LoRA rate it shares), its other seeds at the
chosen rate, the test evaluation of every trained model, the treatment again with beta scale 0 and its importance
probe; then the other arms the same way; then the ablations. ``report`` renders whatever has landed, marking what
is missing, and states the verdict of the win criterion once the primary pair, its beta-off evaluations and its
importance probes are complete (the other arms and the ablations are not needed for it).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from palimpsa.upgrade.io.output import write_text_atomic  # noqa: E402
from pretrain_base import run_until  # noqa: E402  (the scripts folder is not a package)

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "upgrade" / "assets" / "recall-base"
VALIDATION_TASKS = ("passkey", "niah_fwpkm", "mqar_gap_32", "repeat")
RECALL_TASKS = ("passkey", "niah_fwpkm", "repeat", "mqar_gap_8", "mqar_gap_32", "mqar_gap_96",
                "mqar_interference_32")
PRIMARY = ("beta-lora", "mamba2-lora")
TIMESCALES = ["*.dt_bias", "*.A_log", "*.mixer.D"]
TIE = 0.01  # validation scores this close go to the smaller rate
MAX_EXTENSIONS = 3


@dataclass(frozen=True)
class Arm:
    """What trains, and how its rates are chosen: ``grid`` names the rate searched (``lr`` or ``beta_lr``) and its
    points; ``rates_from`` an arm whose chosen rates it takes without a search; ``lora_from`` the arm whose chosen
    LoRA rate it shares (the treatment shares the control's, so the adapters are identical)."""

    plain: bool
    mode: str
    seeds: int
    grid: tuple[str, tuple[float, ...]] | None = None
    lora_delay: float = 0.0
    rates_from: str | None = None
    lora_from: str | None = None
    patterns: tuple[str, ...] = ()


ARMS = {
    "mamba2-lora": Arm(True, "lora", 5, ("lr", (3e-4, 1e-3, 3e-3)), lora_delay=0.3),
    "beta-lora": Arm(False, "beta+lora", 5, ("beta_lr", (3e-3, 1e-2, 3e-2)), lora_delay=0.3,
                     lora_from="mamba2-lora"),
    "beta": Arm(False, "beta", 3, ("beta_lr", (3e-3, 1e-2, 3e-2))),
    "mamba2-timescales": Arm(True, "patterns", 3, ("lr", (1e-4, 3e-4, 1e-3)), patterns=tuple(TIMESCALES)),
    "mamba2-full": Arm(True, "all", 3, ("lr", (1e-4, 3e-4, 1e-3))),
    "beta-lora-concurrent": Arm(False, "beta+lora", 3, rates_from="beta-lora"),
    "mamba2-lora-concurrent": Arm(True, "lora", 3, rates_from="mamba2-lora"),
}
# the treatment at its chosen rates, seed 0, with one thing changed (recipe overrides, dotted)
ABLATIONS = {
    "gain-init-1e-4": {"model.beta_init": 1e-4},
    "gain-init-1e-2": {"model.beta_init": 1e-2},
    "gain-linear-dt": {"beta_form": "linear-dt"},
    "gate-rank-4": {"model.beta_rank": 4},
    "gate-rank-64": {"model.beta_rank": 64},
    "layers-half": {"layers": "half"},
    "state-passing-off": {"data.state_passing": False},
    "lora-delay-0.6": {"lora_delay": 0.6},
}  # the LoRA delay at 0% is the secondary arm beta-lora-concurrent


@dataclass
class Settings:
    base: str = str(BASE.relative_to(ROOT))  # inside the repository: relative to it (the ledger is committed)
    steps: int = 600
    batch_size: int = 16
    train_length: int = 2048
    pretrain_length: int = 512
    per_bucket: int = 200
    validation_per_task: int = 100
    buckets: tuple = ((256, 512), (512, 1024), (1024, 2048), (2048, 4096), (4096, 8192))
    nll_windows: int = 256
    nll_multiple: int = 16
    importance_distance: int = 4096
    tasks: tuple = RECALL_TASKS
    arms: tuple = tuple(ARMS)
    ablations: tuple = tuple(ABLATIONS)
    seeds: dict = field(default_factory=dict)  # arm -> count, overriding Arm.seeds
    grids: dict = field(default_factory=dict)  # arm -> first grid points, overriding Arm.grid's
    eval_batch: int = 16
    resamples: int = 10_000

    def base_path(self) -> str:
        """The base as a path to load (a relative one is the repository's)."""
        return str(ROOT / self.base) if not Path(self.base).is_absolute() else self.base

    def seeds_of(self, arm: str) -> int:
        return int(self.seeds.get(arm, ARMS[arm].seeds))

    def grid_of(self, arm: str) -> list[float]:
        return [float(x) for x in self.grids.get(arm, ARMS[arm].grid[1])]

    def validation_buckets(self) -> list[tuple[int, int]]:
        return [tuple(b) for b in self.buckets if b[1] <= self.train_length]

    def beyond(self) -> list[int]:
        return [i for i, b in enumerate(self.buckets) if b[0] >= self.train_length]


# -- the ledger ----------------------------------------------------------------------------------------------------

class Ledger:
    """``work/ledger.json``: the settings and every landed piece's result, rewritten atomically after each piece;
    per-prompt records in ``work/records/<piece>.json``."""

    def __init__(self, work: Path, settings: Settings | None = None):
        self.work = work
        self.path = work / "ledger.json"
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            stored = Settings(**{k: tuple(tuple(b) for b in v) if k == "buckets" else
                                 (tuple(v) if isinstance(v, list) else v) for k, v in data["settings"].items()})
            if settings is not None and _public(settings) != _public(stored):
                changed = sorted(k for k in _public(settings) if _public(settings)[k] != _public(stored)[k])
                raise SystemExit(f"longctx_experiment: {work} holds a run with other settings ({', '.join(changed)});"
                                 " give the same options, or another --work")
            self.settings, self.pieces = stored, data["pieces"]
        else:
            self.settings, self.pieces = settings or Settings(), {}

    def save(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps({"settings": _public(self.settings), "pieces": self.pieces},
                                                indent=1, default=_json_default) + "\n")

    def land(self, piece: str, result: dict, records: dict | None = None) -> None:
        if records is not None:
            path = self.work / "records" / (piece.replace("/", "__").replace("@", "_at_") + ".json")
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(records, separators=(",", ":")) + "\n")
            result = {**result, "records": str(path.relative_to(self.work))}
        self.pieces[piece] = result
        self.save()

    def records(self, piece: str) -> dict:
        return json.loads((self.work / self.pieces[piece]["records"]).read_text())


def _public(settings: Settings) -> dict:
    data = dict(settings.__dict__)
    data["buckets"] = [list(b) for b in settings.buckets]
    data["arms"], data["ablations"], data["tasks"] = list(settings.arms), list(settings.ablations), list(
        settings.tasks)
    return data


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


# -- the plan: which piece comes next -----------------------------------------------------------------------------

def chosen_rates(ledger: Ledger, arm: str) -> dict | None:
    """The arm's rates once its search is complete (None before): the best validation recall of its grid as
    :func:`grid_points` leaves it (ties within ``TIE`` to the smaller rate), or the rates of the arm it takes
    them from."""
    spec = ARMS[arm]
    if spec.rates_from:
        return chosen_rates(ledger, spec.rates_from)
    points = grid_points(ledger, arm)
    best = None if points is None else _best(ledger, arm, points)
    return None if best is None else rates_for(ledger, arm, best)


def _best(ledger: Ledger, arm: str, points: list[float]) -> float | None:
    scores = [_score(ledger, arm, p) for p in points]
    if any(s is None for s in scores):
        return None
    return min(p for p, s in zip(points, scores) if s >= max(scores) - TIE)


def grid_points(ledger: Ledger, arm: str) -> list[float] | None:
    """The arm's grid as it stands: the first points, extended by a factor 3 beyond an end while the best
    validation recall sits at that end (at most ``MAX_EXTENSIONS`` times; never beyond a rate of 1). None while
    the arm waits for another's choice (the LoRA rate it shares)."""
    spec = ARMS[arm]
    if spec.lora_from and chosen_rates(ledger, spec.lora_from) is None:
        return None
    points = sorted(ledger.settings.grid_of(arm))
    for _ in range(MAX_EXTENSIONS):
        scores = [_score(ledger, arm, p) for p in points]
        best = _best(ledger, arm, points) if len(points) > 1 else None
        if best is None:
            break
        # the chosen rate at an end that beats its neighbour by more than the tie margin: the best rate may lie
        # beyond it (a flat grid, nothing learned anywhere, is not extended)
        if best == points[0] and scores[0] > scores[1] + TIE:
            points.insert(0, points[0] / 3)
        elif best == points[-1] and scores[-1] > scores[-2] + TIE and points[-1] * 3 <= 1:
            points.append(points[-1] * 3)
        else:
            break
    return points


def _score(ledger: Ledger, arm: str, rate: float) -> float | None:
    return ledger.pieces.get(f"val/{arm}/{_rate_tag(arm, rate)}/seed0", {}).get("recall")


def rates_for(ledger: Ledger, arm: str, rate: float) -> dict:
    spec = ARMS[arm]
    name = spec.grid[0]
    rates = {name: rate}
    if spec.lora_from:
        rates["lr"] = chosen_rates(ledger, spec.lora_from)["lr"]
    if name == "beta_lr" and "lr" not in rates:
        rates["lr"] = rate  # beta alone: the main rate is the gate's
    return rates


def _rate_tag(arm: str, rate: float) -> str:
    return f"{ARMS[arm].grid[0]}{rate:.3g}"


@dataclass
class Piece:
    name: str  # train/ARM/TAG/seedS, val/..., test/MODEL/seedS, importance/..., the ledger's key
    kind: str  # train, val, test, importance
    arm: str | None = None
    seed: int = 0
    rates: dict | None = None
    ablation: str | None = None
    beta_scale: float | None = None
    train: str | None = None  # an evaluation's fine-tune (the ledger key of the model it evaluates)


def next_pieces(ledger: Ledger) -> tuple[list[Piece], list[str]]:
    """The pieces that can run now (in the protocol's order) and what waits on what."""
    settings, done = ledger.settings, ledger.pieces
    ready, waiting = [], []
    if "test/base" not in done:
        ready.append(Piece("test/base", "test"))

    def trained(arm: str, tag: str, seed: int, rates: dict, ablation: str | None = None) -> str:
        train = f"train/{arm}/{tag}/seed{seed}"
        if train not in done and all(p.name != train for p in ready):  # a search's chosen point is a seed too
            ready.append(Piece(train, "train", arm, seed, rates, ablation))
        return train

    arms = [a for a in settings.arms if a in ARMS]
    for arm in arms:  # the searches
        spec = ARMS[arm]
        if spec.grid is None:
            continue
        points = grid_points(ledger, arm)
        if points is None:
            waiting.append(f"{arm}'s search waits for {spec.lora_from}'s chosen rate")
            continue
        for rate in points:
            tag = _rate_tag(arm, rate)
            train = trained(arm, tag, 0, rates_for(ledger, arm, rate))
            if train in done and f"val/{arm}/{tag}/seed0" not in done:
                ready.append(Piece(f"val/{arm}/{tag}/seed0", "val", arm, 0, rates_for(ledger, arm, rate),
                                   train=train))
    for arm in arms:  # the seeds and their test evaluations
        rates = chosen_rates(ledger, arm)
        if rates is None:
            waiting.append(f"{arm}'s seeds wait for its rates")
            continue
        tag = "chosen" if ARMS[arm].grid is None else _rate_tag(arm, rates[ARMS[arm].grid[0]])
        for seed in range(settings.seeds_of(arm)):
            train = trained(arm, tag, seed, rates)
            if train not in done:
                continue
            if f"test/{arm}/seed{seed}" not in done:
                ready.append(Piece(f"test/{arm}/seed{seed}", "test", arm, seed, rates, train=train))
            if arm == "beta-lora":
                if f"test/{arm}@beta0/seed{seed}" not in done:
                    ready.append(Piece(f"test/{arm}@beta0/seed{seed}", "test", arm, seed, rates, beta_scale=0.0,
                                       train=train))
                if f"importance/{arm}/seed{seed}" not in done:
                    ready.append(Piece(f"importance/{arm}/seed{seed}", "importance", arm, seed, rates, train=train))
    treatment = chosen_rates(ledger, "beta-lora") if "beta-lora" in arms else None
    for ablation in settings.ablations:
        if treatment is None:
            waiting.append(f"ablation {ablation} waits for the treatment's rates")
            continue
        arm = f"ablation-{ablation}"
        train = trained("beta-lora", f"ablation-{ablation}", 0, treatment, ablation)
        if train in done and f"test/{arm}/seed0" not in done:
            ready.append(Piece(f"test/{arm}/seed0", "test", "beta-lora", 0, treatment, ablation, train=train))
    ready.sort(key=_order)
    return ready, waiting


def _order(piece: Piece) -> tuple:
    """The base first; then the evaluations of models already trained (so that a model lives for one call only);
    then fine-tunes: the primary pair's searches and seeds, then the other arms' searches and seeds, then the
    ablations. The verdict needs the primary pair alone, so it comes after about a third of the GPU time instead of
    at the end (every piece is seeded and independent of the order)."""
    if piece.name == "test/base":
        return (0,)
    if piece.kind != "train":
        return (1,)
    group = 2 if piece.ablation else (0 if piece.arm in PRIMARY else 1)
    return (2, group, piece.seed)  # seed 0 first: a search's fine-tunes before the chosen rate's other seeds


# -- recipes and fine-tunes ------------------------------------------------------------------------------------------

def recipe_for(piece: Piece, settings: Settings, scratch: Path, device: str) -> dict:
    spec = ARMS[piece.arm]
    ablation = ABLATIONS.get(piece.ablation or "", {})
    steps = settings.steps
    base = settings.base_path()
    n_layer = _n_layer(base)
    layers = "none" if spec.plain else f"0-{n_layer - 1}"  # every layer
    if ablation.get("layers") == "half":
        layers = str(max(1, n_layer // 2))  # a count: spread over depth
    model = {"path": base, "upgrade_layers": layers, "dtype": "float32"}
    if ablation.get("beta_form") == "linear-dt":
        model = {"path": str(linear_dt_model(base, scratch)), "dtype": "float32"}
    text = {"type": "stdlib", "weight": 0.13}  # a third of the tokens: stdlib files average ~20K, documents ~1.3K
    tasks = [{"type": "synthetic", "task": task, "documents": 100_000, "weight": 1, "loss": "answer"}
             for task in ("passkey", "niah-fwpkm", "repeat", "mqar-gap")]
    recipe = {
        "output_dir": str(scratch / piece.name.replace("/", "__")),
        "model": model,
        "data": {"sources": [text, *tasks], "seq_len": settings.train_length, "batch_size": settings.batch_size,
                 "state_passing": True, "eval_documents": 4, "seed": 7 + piece.seed, "workers": 2},
        "trainable": {"mode": spec.mode, **({"patterns": list(spec.patterns)} if spec.patterns else {})},
        "optim": {"lr": piece.rates["lr"], "weight_decay": 0.0, "grad_clip": 1.0},
        "schedule": {"type": "cosine", "warmup_steps": max(1, steps // 20), "min_lr_ratio": 0.1},
        "train": {"max_steps": steps, "mixed_precision": "bf16" if device == "cuda" else "no", "seed": piece.seed,
                  "log_every": max(1, steps // 30)},
        "eval": {"every": 0, "batches": 2, "passkey_samples": 0, "importance": False},
        "checkpoint": {"every": max(1, steps // 6), "keep": 1},
        "logging": {"tensorboard": False},
    }
    if "beta_lr" in piece.rates:
        recipe["optim"]["beta_lr"] = piece.rates["beta_lr"]
    if "lora" in spec.mode:
        delay = ablation.get("lora_delay", spec.lora_delay)
        recipe["lora"] = {"r": 8, "alpha": 16, "target_modules": ["in_proj", "out_proj"], "layers": "all",
                          "start_step": int(round(delay * steps)), "warmup_steps": max(1, steps // 20)}
    for key, value in ablation.items():
        if "." in key:
            section, name = key.split(".")
            recipe[section][name] = value
    return recipe


def _n_layer(base: str) -> int:
    from palimpsa.upgrade.convert.checkpoint import load_checkpoint

    return int(load_checkpoint(base).config.n_layer)


def linear_dt_model(base: str, scratch: Path) -> Path:
    """The base with every layer upgraded in the first format's gain parameterisation (``linear-dt``: a plain
    per-head gain times dt), for the parameterisation ablation; written once under ``scratch``."""
    import torch
    from palimpsa.upgrade import PalimpsaForCausalLM, upgrade_model
    from palimpsa.upgrade.convert.loading import load_tokenizer

    folder = scratch / "models" / "linear-dt"
    if (folder / "config.json").is_file():
        return folder
    upgraded = upgrade_model(base, f"0-{_n_layer(base) - 1}", verify=False).model
    config = copy.deepcopy(upgraded.config)
    config.beta_form = "linear-dt"
    model = PalimpsaForCausalLM(config)
    state = {k: v for k, v in upgraded.state_dict().items() if not k.endswith("beta_log_gain")}
    for index in config.upgraded_layers:
        state[f"backbone.layers.{index}.mixer.beta_gain"] = torch.full((model.backbone.layers[index].mixer.nheads,),
                                                                       float(config.beta_init))
    model.load_state_dict(state, strict=True)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    load_tokenizer(base, base, required=True).save_pretrained(staging)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def fine_tune(piece: Piece, ledger: Ledger, scratch: Path, deadline: float, device: str) -> dict | None:
    """Run (or resume, on the same machine) the piece's fine-tune until it ends or the deadline; its result once
    complete."""
    from palimpsa.upgrade.train.layout import latest_checkpoint

    recipe = recipe_for(piece, ledger.settings, scratch, device)
    run = Path(recipe["output_dir"])
    reused = (run / "final" / "config.json").is_file()  # trained by an earlier call on this (warm) machine
    if not reused:
        recipe_path = run.with_name(run.name + ".yaml")
        import yaml

        recipe_path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(recipe_path, yaml.safe_dump(recipe, sort_keys=False))
        command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(recipe_path)]
        if (run / "recipe.yaml").is_file() and latest_checkpoint(run) is not None:
            command.append("--resume")
        log = run.with_name(run.name + ".log")
        with open(log, "a") as handle:
            code = run_until(command, deadline, handle, grace=30)  # a cut fine-tune starts over anyway
        if not (run / "final" / "config.json").is_file():
            if time.monotonic() < deadline and code not in (0, None):
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise SystemExit(f"longctx_experiment: {piece.name} failed (exit {code}); {log}:\n  "
                                 + "\n  ".join(tail))
            return None
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [row for row in rows if "loss" in row]
    return {"rates": piece.rates, "seed": piece.seed, "model": str(run / "final"),
            "final_loss": losses[-1]["loss"], "tokens_per_s": losses[-1].get("tokens_per_s"),
            "gain_geomean": losses[-1].get("gain_geomean"), "steps": losses[-1]["step"],
            **({"reused": True} if reused else {})}


# -- evaluations -------------------------------------------------------------------------------------------------

def model_of(piece: Piece, ledger: Ledger) -> str:
    """The model an evaluation piece evaluates: the base, or the fine-tune it names."""
    return ledger.settings.base_path() if piece.train is None else ledger.pieces[piece.train]["model"]


def evaluate(piece: Piece, ledger: Ledger, device: str) -> tuple[dict, list[dict] | None]:
    import torch
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.evaluate.distance import VALIDATION_SEED, bucket_means, run_suite

    settings = ledger.settings
    model, tokenizer = load_model_and_tokenizer(model_of(piece, ledger))
    model = model.to(device).eval()
    if piece.beta_scale is not None:
        model.set_beta_scale(piece.beta_scale)
    started = time.perf_counter()
    if piece.kind == "importance":
        return importance(model, tokenizer, settings)
    if piece.kind == "val":
        buckets = settings.validation_buckets()
        per_bucket = max(1, math.ceil(settings.validation_per_task / len(buckets)))
        items = suite(tokenizer, model.config.vocab_size, VALIDATION_TASKS, buckets, per_bucket, VALIDATION_SEED)
        records = run_suite(model, tokenizer, items, settings.eval_batch)
        means = bucket_means(records, buckets)
        recall = sum(sum(v for v in means[t] if v is not None) / len(means[t]) for t in VALIDATION_TASKS) / len(
            VALIDATION_TASKS)
        return {"recall": recall, "by_task": means, "rates": piece.rates,
                "seconds": round(time.perf_counter() - started, 1)}, None
    items = suite(tokenizer, model.config.vocab_size, settings.tasks, settings.buckets, settings.per_bucket, 0)
    records = run_suite(model, tokenizer, items, settings.eval_batch)
    with torch.no_grad():
        nll = nll_results(model, tokenizer, settings)
    result = {"by_bucket": bucket_means(records, settings.buckets),
              "part_by_bucket": bucket_means(records, settings.buckets, "part"),
              "stale_by_bucket": bucket_means(records, settings.buckets, "stale"), **nll,
              "seed": piece.seed, "rates": piece.rates, "beta_scale": piece.beta_scale,
              "seconds": round(time.perf_counter() - started, 1)}
    return result, compact_records(records, items)


_SUITES: dict = {}  # the prompts built in this process, by tokenizer and suite


def suite(tokenizer, vocab_size: int, tasks, buckets, per_bucket: int, seed: int) -> list:
    """``distance_suite``'s prompts, built once per process: every evaluation of a call asks for the same ones (the
    test suite took 38 s to build on a CPU, ahead of each test evaluation). Keyed by the tokenizer's whole
    definition, so a model with another tokenizer gets its own."""
    import hashlib

    from palimpsa.upgrade.evaluate.distance import distance_suite

    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    key = (hashlib.sha256(definition.encode()).hexdigest(), vocab_size, tuple(tasks),
           tuple(tuple(b) for b in buckets), per_bucket, seed)
    if key not in _SUITES:
        _SUITES[key] = distance_suite(tokenizer, vocab_size, tasks, buckets, per_bucket, seed=seed)
    return _SUITES[key]


def compact_records(records: list[dict], items) -> dict:
    """Per task and bucket, each prompt's score as a whole count in the suite's order: answers right (0 or 1) or
    MQAR queries right (``of`` the queries), and for NIAH and repeat the digits or characters right (``part_of``)."""
    compact: dict = {}
    for record, item in zip(records, items):
        task, bucket, _ = record["key"].split("/")
        cell = compact.setdefault(task, {}).setdefault(bucket, {"score": [], "of": 1})
        if item.mqar is not None:
            cell["of"] = len(item.mqar.targets)
        cell["score"].append(round(record["score"] * cell["of"]))
        if "part" in record:
            cell["part_of"] = len(item.sample.answer)
            cell.setdefault("part", []).append(round(record["part"] * cell["part_of"]))
        if "stale" in record:  # interference: queries answered with the overwritten value
            cell.setdefault("stale", []).append(round(record["stale"] * cell["of"]))
    return compact


def nll_results(model, tokenizer, settings: Settings) -> dict:
    """NLL at 1x (mean over windows of the pretraining length from a fresh state) and against position over
    ``nll_multiple`` pretraining lengths of ``pydoc_data.topics`` with the state carried (per power-of-two bin)."""
    import torch.nn.functional as F
    from palimpsa.upgrade.evaluate.evaluation import nll_by_position
    from palimpsa.upgrade.evaluate.tasks import default_long_text

    device = next(model.parameters()).device
    ids = tokenizer(default_long_text(), add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    window = settings.pretrain_length
    count = min(settings.nll_windows, (ids.numel() - 1) // window)
    rows = ids[: count * window].view(count, window)
    total = 0.0
    for first in range(0, count, 64):
        chunk = rows[first : first + 64].to(device)
        logits = model(chunk).logits[:, :-1].float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum").item()
    at_1x = total / (count * (window - 1))
    length = min(ids.numel(), window * settings.nll_multiple + 1)
    losses = nll_by_position(model, ids[:length], settings.train_length)
    edges = [0] + [window * 2**i for i in range(int(math.log2(settings.nll_multiple)) + 1)]
    bins = [[edges[i], min(edges[i + 1], losses.numel())] for i in range(len(edges) - 1) if edges[i] < losses.numel()]
    return {"nll_1x": at_1x, "nll_by_position": [{"from": a, "to": b, "nll": losses[a:b].mean().item()}
                                                 for a, b in bins]}


def importance(model, tokenizer, settings: Settings) -> tuple[dict, dict]:
    """``inspect-importance`` on a passkey prompt with its needle ``importance_distance`` tokens before the end:
    the per-layer summary (for the ledger) and the whole report (per head, for the heatmap)."""
    from palimpsa.upgrade.evaluate.importance import inspect_importance, task_probe

    length = settings.importance_distance * 5 // 4
    report = inspect_importance(model, task_probe(tokenizer, "passkey", length, depth=0.2, seed=0))
    return {"probe": report["probe"], "layers": [{"layer": layer["layer"], **layer["summary"]}
                                                 for layer in report["layers"]]}, report


# -- statistics --------------------------------------------------------------------------------------------------

def contrast(ledger: Ledger, treated: str, control: str, buckets: list[int], tasks=None,
             resamples: int | None = None, seed: int = 0) -> dict | None:
    """``treated`` minus ``control`` in mean recall over ``buckets`` (tasks weighted equally), paired by prompt and
    by seed (seed i of one against seed i of the other). Per seed pair a paired bootstrap over prompts; the
    estimate is the mean over seed pairs, its 95% interval from resampling seed pairs with replacement and the
    prompts within each. None while a model's records are missing."""
    import numpy as np

    pairs = []
    for index in range(64):
        a, b = _test_piece(ledger, treated, index), _test_piece(ledger, control, index)
        if a is None or b is None:
            break
        pairs.append((a, b))
    if not pairs:
        return None
    resamples = resamples or ledger.settings.resamples
    tasks = tasks or ledger.settings.tasks
    rng = np.random.default_rng(seed)
    differences = []  # per seed pair, per task: the paired differences over the chosen buckets' prompts
    for a, b in pairs:
        left, right = _scores(ledger, a, buckets, tasks), _scores(ledger, b, buckets, tasks)
        differences.append([left[t] - right[t] for t in tasks])
    estimate = float(np.mean([np.mean([d.mean() for d in per_task]) for per_task in differences]))
    draws = np.zeros(resamples)
    for start in range(0, resamples, 1000):
        count = min(1000, resamples - start)
        chosen = rng.integers(0, len(pairs), size=(count, len(pairs)))
        total = np.zeros(count)
        for slot in range(len(pairs)):
            per_seed = np.zeros(count)
            for task_index in range(len(tasks)):
                values = np.stack([differences[s][task_index] for s in range(len(pairs))])  # [seeds, prompts]
                prompts = rng.integers(0, values.shape[1], size=(count, values.shape[1]))
                per_seed += values[chosen[:, slot][:, None], prompts].mean(axis=1)
            total += per_seed / len(tasks)
        draws[start : start + count] = total / len(pairs)
    low, high = np.quantile(draws, [0.025, 0.975])
    return {"treated": treated, "control": control, "seeds": len(pairs), "estimate": estimate,
            "interval": [float(low), float(high)], "buckets": buckets}


def _test_piece(ledger: Ledger, model: str, seed: int) -> str | None:
    name = f"test/{model}/seed{seed}" if model != "base" else "test/base"
    return name if name in ledger.pieces else None


def _scores(ledger: Ledger, piece: str, buckets: list[int], tasks) -> dict:
    """Per task, the scores of the prompts in ``buckets`` in the suite's order (the same prompts in every model)."""
    import numpy as np

    settings = ledger.settings
    records = ledger.records(piece)
    scores = {}
    for task in tasks:
        cells = [records[task][f"{settings.buckets[b][0]}-{settings.buckets[b][1]}"] for b in buckets]
        scores[task] = np.concatenate([np.array(c["score"], dtype=float) / c["of"] for c in cells])
    return scores


def verdict(ledger: Ledger) -> dict:
    """The win criterion of the protocol on what has landed; ``decided`` once every part of it can be read."""
    settings = ledger.settings
    beyond = settings.beyond()
    primary = contrast(ledger, "beta-lora", "mamba2-lora", beyond)
    beta_off = contrast(ledger, "beta-lora@beta0", "mamba2-lora", beyond)
    treated = [ledger.pieces[n] for n in ledger.pieces if n.startswith("test/beta-lora/seed")]
    base = ledger.pieces.get("test/base")
    layers: dict[int, list[float]] = {}
    for name, piece in ledger.pieces.items():
        if name.startswith("importance/beta-lora/"):
            for layer in piece["layers"]:
                layers.setdefault(layer["layer"], []).append(layer.get("needle_share_above_2x_prior_at_question",
                                                                       0.0))
    share = max((sum(v) / len(v) for v in layers.values()), default=None)
    nll = (sum(p["nll_1x"] for p in treated) / len(treated) / base["nll_1x"] - 1) if treated and base else None
    parts = {
        "recall_gain": None if primary is None else primary["estimate"] >= 0.10 and primary["interval"][0] > 0,
        "nll_within_1pct": None if nll is None else abs(nll) <= 0.01,
        "vanishes_at_beta_0": None if beta_off is None else beta_off["interval"][0] <= 0,
        "importance_used": None if share is None else share >= 0.10,
    }
    seeds = settings.seeds_of("beta-lora")
    complete = (primary is not None and primary["seeds"] >= seeds and beta_off is not None
                and beta_off["seeds"] >= seeds and min((len(v) for v in layers.values()), default=0) >= seeds
                and all(value is not None for value in parts.values()))
    return {"primary": primary, "beta_off": beta_off, "nll_1x_vs_base": nll, "needle_share_above_2x": share,
            "parts": parts, "decided": complete,
            "helps": complete and all(parts.values())}


# -- the report --------------------------------------------------------------------------------------------------

def report(ledger: Ledger, output: Path) -> dict:
    settings = ledger.settings
    models = ["base"] + [a for a in settings.arms if any(n.startswith(f"test/{a}/") for n in ledger.pieces)]
    if any(n.startswith("test/beta-lora@beta0/") for n in ledger.pieces):
        models.append("beta-lora@beta0")
    models += [f"ablation-{a}" for a in settings.ablations if f"test/ablation-{a}/seed0" in ledger.pieces]
    summary = {}
    for name in models:
        tests = [p for n, p in ledger.pieces.items() if (n == "test/base" if name == "base" else
                                                        n.startswith(f"test/{name}/seed"))]
        if tests:
            summary[name] = _mean_over_seeds(tests, settings)
    contrasts = {f"{a} - mamba2-lora": contrast(ledger, a, "mamba2-lora", settings.beyond())
                 for a in models if a not in ("mamba2-lora",)}
    contrasts = {k: v for k, v in contrasts.items() if v is not None}
    state = {
        "date": time.strftime("%Y-%m-%d"), "settings": _public(settings), "summary": summary,
        "contrasts": contrasts, "verdict": verdict(ledger), "searches": _searches(ledger),
        "missing": _missing(ledger), "python": platform.python_version(), "machines": _machines(ledger),
    }
    output.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output / "longctx.json", json.dumps(state, indent=1, default=_json_default) + "\n")
    plots(state, ledger, output)
    write_text_atomic(output / "longctx.md", markdown(state))
    return state


def _mean_over_seeds(tests: list[dict], settings: Settings) -> dict:
    def averaged(key: str, task: str) -> list[float | None]:
        """Per bucket, the mean over the seeds' tests of ``key``'s figure (None where a test lacks it)."""
        return [None if any(x.get(key, {}).get(task) is None or x[key][task][b] is None for x in tests) else
                sum(x[key][task][b] for x in tests) / len(tests) for b in range(len(settings.buckets))]

    by_bucket = {task: averaged("by_bucket", task) for task in settings.tasks}
    beyond = settings.beyond()
    within = [i for i, b in enumerate(settings.buckets) if b[1] <= settings.train_length]

    def mean_of(indices):
        values = [by_bucket[t][i] for t in settings.tasks for i in indices if by_bucket[t][i] is not None]
        return sum(values) / len(values) if values else None

    parts = {t: averaged("part_by_bucket", t) for t in ("niah_fwpkm", "repeat") if t in settings.tasks}
    stale = {t: averaged("stale_by_bucket", t) for t in settings.tasks if t.startswith("mqar_interference")}
    return {"seeds": len(tests), "by_bucket": by_bucket, "part_by_bucket": parts, "stale_by_bucket": stale,
            "recall_within": mean_of(within), "recall_beyond": mean_of(beyond),
            "nll_1x": sum(t["nll_1x"] for t in tests) / len(tests),
            "nll_by_position": tests[0]["nll_by_position"]}


def _searches(ledger: Ledger) -> dict:
    rows = {}
    for name, piece in ledger.pieces.items():
        if name.startswith("val/"):
            _, arm, tag, _ = name.split("/")
            rows.setdefault(arm, []).append({"tag": tag, "rates": piece["rates"], "recall": piece["recall"]})
    for arm in rows:
        chosen = chosen_rates(ledger, arm)
        for row in rows[arm]:
            row["chosen"] = chosen is not None and all(chosen.get(k) == v for k, v in row["rates"].items())
    return rows


def _machines(ledger: Ledger) -> dict[str, int]:
    counts: dict[str, int] = {}
    for piece in ledger.pieces.values():
        if "device" in piece:
            key = f"{piece['device']}, torch {piece.get('torch', '?')}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def _missing(ledger: Ledger) -> list[str]:
    ready, waiting = next_pieces(ledger)
    return [p.name for p in ready] + waiting


def markdown(state: dict) -> str:
    settings, summary, verdict_ = state["settings"], state["summary"], state["verdict"]
    buckets = [f"{a}-{b}" for a, b in settings["buckets"]]
    beyond = [buckets[i] for i, (a, _) in enumerate(settings["buckets"]) if a >= settings["train_length"]]
    lines = ["# Does metaplasticity help long-context recall?", "",
             f"Rendered {state['date']} by `python scripts/longctx_experiment.py report` from the ledger of the "
             "runs; the protocol, fixed before them: [longctx-protocol.md](longctx-protocol.md). Machine-readable: "
             "[longctx.json](longctx.json).", ""]
    if state["machines"]:
        lines += ["Pieces ran on: " + "; ".join(f"{m} ({n} pieces)" for m, n in state["machines"].items()) + ".", ""]
    if verdict_["decided"]:
        answer = "yes" if verdict_["helps"] else "no at this scale"
        lines += [f"**Verdict: {answer}.**", ""]
    else:
        lines += ["**Verdict: not yet decided** (the runs are not complete; what is missing is listed at the end).",
                  ""]
    primary = verdict_["primary"]
    if primary:
        lines += [f"Primary contrast, `beta-lora` minus `mamba2-lora`, mean recall beyond the fine-tuning distance "
                  f"({', '.join(beyond)} tokens), {primary['seeds']} seed pairs: **{primary['estimate']:+.3f}** "
                  f"(95% interval {primary['interval'][0]:+.3f} to {primary['interval'][1]:+.3f}).", ""]
    lines += ["| part of the win criterion | measured | holds |", "|---|---|---|"]
    parts = verdict_["parts"]

    def holds(value):
        return "-" if value is None else ("yes" if value else "no")

    beta_off = verdict_["beta_off"]
    share = verdict_["needle_share_above_2x"]
    nll = verdict_["nll_1x_vs_base"]
    gain = "-" if not primary else f"{primary['estimate']:+.3f}"
    off = "-" if not beta_off else (f"{beta_off['estimate']:+.3f} ({beta_off['interval'][0]:+.3f} to "
                                    f"{beta_off['interval'][1]:+.3f})")
    lines += [
        f"| recall gain >= 0.10, interval above 0 | {gain} | {holds(parts['recall_gain'])} |",
        f"| NLL at 1x within 1% of the base | {'-' if nll is None else f'{100 * nll:+.2f}%'} | "
        f"{holds(parts['nll_within_1pct'])} |",
        f"| gain gone at beta scale 0 | {off} | {holds(parts['vanishes_at_beta_0'])} |",
        f"| needle's cells above 2 I_prior >= 10% in a layer | {'-' if share is None else f'{share:.3f}'} | "
        f"{holds(parts['importance_used'])} |", ""]
    lines += ["## Recall by needle-to-question distance (mean over seeds)", "",
              "![recall against distance](longctx/recall.png)", "",
              "| model | seeds | recall within | recall beyond | NLL at 1x |", "|---|---|---|---|---|"]
    for name, row in summary.items():
        lines.append(f"| {name} | {row['seeds']} | {_fmt(row['recall_within'])} | {_fmt(row['recall_beyond'])} | "
                     f"{row['nll_1x']:.4f} |")
    lines.append("")
    for task in settings["tasks"]:
        for title, key in ((f"**{task}**", "by_bucket"),
                           (f"{task}, per {'digit' if task == 'niah_fwpkm' else 'character'}", "part_by_bucket"),
                           (f"{task}, answered with the overwritten value", "stale_by_bucket")):
            rows = [(name, row[key][task]) for name, row in summary.items() if task in row.get(key, {})]
            if not rows:
                continue
            lines += [title, "", "| model | " + " | ".join(buckets) + " |", "|---|" + "---|" * len(buckets)]
            lines += [f"| {name} | " + " | ".join(_fmt(v) for v in values) + " |" for name, values in rows]
            lines.append("")
    if state["contrasts"]:
        lines += ["## Contrasts against `mamba2-lora` beyond the fine-tuning distance", "",
                  "| model | seed pairs | difference | 95% interval |", "|---|---|---|---|"]
        for c in state["contrasts"].values():
            lines.append(f"| {c['treated']} | {c['seeds']} | {c['estimate']:+.3f} | "
                         f"{c['interval'][0]:+.3f} to {c['interval'][1]:+.3f} |")
        lines.append("")
    if state["searches"]:
        lines += ["## Learning-rate searches (seed 0, validation recall within the fine-tuning distance)", "",
                  "| arm | rates | validation recall | chosen |", "|---|---|---|---|"]
        for arm, rows in state["searches"].items():
            for row in sorted(rows, key=lambda r: sorted(r["rates"].items())):
                rates = ", ".join(f"{k} {v:g}" for k, v in sorted(row["rates"].items()))
                lines.append(f"| {arm} | {rates} | {row['recall']:.3f} | {'yes' if row['chosen'] else ''} |")
        lines.append("")
    if state["missing"]:
        lines += ["## Not yet run", ""] + [f"- {m}" for m in state["missing"]] + [""]
    return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def plots(state: dict, ledger: Ledger, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = output / "longctx"
    folder.mkdir(parents=True, exist_ok=True)
    settings = state["settings"]
    centers = [math.sqrt(a * b) for a, b in settings["buckets"]]
    tasks = settings["tasks"]
    columns = min(4, len(tasks))  # rows of four panels: one row of seven is too wide to read
    rows = -(-len(tasks) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.2 * rows + 0.6), sharey=True,
                                squeeze=False)
    axes = list(grid.flat)
    for axis in axes[len(tasks):]:
        axis.set_visible(False)
    for axis, task in zip(axes, tasks):
        for name, row in state["summary"].items():
            if name.startswith("ablation-"):
                continue
            values = row["by_bucket"][task]
            spread = _seed_spread(ledger, name, task)
            axis.errorbar([c for c, v in zip(centers, values) if v is not None], [v for v in values if v is not None],
                          yerr=[s for s, v in zip(spread, values) if v is not None] if spread else None,
                          marker="o", markersize=3, capsize=2, label=name)
        axis.axvline(settings["train_length"], color="grey", linestyle="--", linewidth=1)
        axis.axvline(settings["pretrain_length"], color="grey", linestyle=":", linewidth=1)
        axis.set_xscale("log", base=2)
        axis.set_title(task, fontsize=9)
        axis.set_xlabel("needle-to-question distance")
        axis.set_ylim(-0.03, 1.03)
        axis.grid(alpha=0.3)
    for row in grid:
        row[0].set_ylabel("recall")
    axes[len(tasks) - 1].legend(fontsize=7)
    figure.suptitle("Recall against distance, mean over seeds (bars: 95% of the seeds' spread; dotted: pretraining "
                    "length, dashed: fine-tuning length)", fontsize=10)
    figure.tight_layout()
    figure.savefig(folder / "recall.png", dpi=110)
    plt.close(figure)
    if "importance/beta-lora/seed0" in ledger.pieces:
        from palimpsa.upgrade.evaluate.importance import plot_importance

        plot_importance(ledger.records("importance/beta-lora/seed0"), folder / "importance-beta-lora-seed0.png")


def _seed_spread(ledger: Ledger, name: str, task: str) -> list[float] | None:
    """Per bucket, 1.96 standard errors of the mean over seeds (None with one seed)."""
    tests = [p for n, p in ledger.pieces.items() if n.startswith(f"test/{name}/seed")]
    if len(tests) < 2:
        return None
    spread = []
    for b in range(len(ledger.settings.buckets)):
        values = [t["by_bucket"][task][b] for t in tests if t["by_bucket"].get(task)]
        mean = sum(values) / len(values)
        variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        spread.append(1.96 * math.sqrt(variance / len(values)))
    return spread


# -- the command -------------------------------------------------------------------------------------------------

def run(ledger: Ledger, scratch: Path, minutes: float, device: str, keep_models: bool = False, log=print,
        overlap: bool = False) -> int:
    """Pieces in order until ``minutes`` are spent; the number that landed. ``overlap``: one fine-tune at a time
    runs beside the evaluations (:func:`run_overlapped`)."""
    if overlap:
        return run_overlapped(ledger, scratch, minutes, device, keep_models, log)
    deadline = time.monotonic() + 60 * minutes
    landed = 0
    # a piece landed here in an earlier call: the machine was kept warm, its kernels are compiled and cached
    warm_machine = (scratch / WARM_MARK).is_file()
    while True:
        ready, waiting = next_pieces(ledger)
        if not ready:
            log("longctx_experiment: nothing left to run" + (f" ({'; '.join(waiting)})" if waiting else ""))
            break
        piece = ready[0]
        left, needs = deadline - time.monotonic(), _estimate(ledger, piece, 60 * minutes,
                                                              warm=landed > 0 or warm_machine)
        if left < needs:
            log(f"longctx_experiment: {left / 60:.1f} min left, {piece.name} needs about {needs / 60:.1f}; "
                "stopping here")
            break
        if _retrain_lost_models(ledger, [piece], scratch, log):
            continue
        log(f"longctx_experiment: {piece.name} ({len(ready)} ready)")
        started = time.perf_counter()
        if piece.kind == "train":
            result = fine_tune(piece, ledger, scratch, deadline, device)
            if not _timed(piece, result, time.perf_counter() - started, scratch, log):
                break
            ledger.land(piece.name, {**result, **_where(device)})
        else:
            result, records = evaluate(piece, ledger, device)
            ledger.land(piece.name, {**result, **_where(device)}, records)
            release_memory()
        landed += 1
        _mark_landed(piece, started, scratch, log)
    if not keep_models:
        prune(ledger)
    return landed


WARM_MARK = "warm"  # in --scratch once a piece has landed on this machine


def _retrain_lost_models(ledger: Ledger, pieces: list[Piece], scratch: Path, log) -> bool:
    """Send back to the queue the fine-tunes whose models these evaluations need but whose machine is gone (models
    live in --scratch; the fine-tunes are seeded, so they train again to the same weights). Whether any was."""
    lost = {p.train for p in pieces if p.train and p.train in ledger.pieces
            and not (Path(model_of(p, ledger)) / "config.json").is_file()}
    for train in sorted(lost):
        log(f"longctx_experiment: {train}'s model is not in {scratch}; it trains again")
        del ledger.pieces[train]
    if lost:
        ledger.save()
    return bool(lost)


def _timed(piece: Piece, result: dict | None, seconds: float, scratch: Path, log) -> dict | None:
    """A fine-tune's result ready to land, with its time (``seconds``), or None when the deadline cut it. A model
    found in --scratch (its ledger entry did not come back from that call) lands without a time: it is unknown."""
    if result is None:
        log(f"longctx_experiment: {piece.name} cut at the deadline; it starts over in the next call")
        return None
    if result.get("reused"):
        log(f"longctx_experiment: {piece.name}'s model was already in {scratch}; it is not trained again")
    else:
        result["seconds"] = round(seconds, 1)
    return result


def _mark_landed(piece: Piece, started: float, scratch: Path, log) -> None:
    """After a piece landed: mark the machine warm (its kernels are compiled) and say how long it took."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / WARM_MARK).touch()
    log(f"longctx_experiment: {piece.name} landed in {time.perf_counter() - started:.0f} s")


OVERLAP_SLOWDOWN = 1.3  # a piece started beside another is costed this much longer (the two share the GPU)


def run_overlapped(ledger: Ledger, scratch: Path, minutes: float, device: str, keep_models: bool = False,
                   log=print) -> int:
    """:func:`run` in two lanes: the next fine-tune trains in its child process while this process runs the
    evaluations that are ready, in order. On an H100 a fine-tune keeps the GPU about 97% busy after a 40-s start,
    while a test evaluation spends its first 50 s building prompts on the CPU and its generation keeps the GPU about
    25% busy (2026-11-25, ``nvidia-smi`` each second), so the two can share the GPU.

    A fine-tune starts when its own time fits (its evaluations then run in this call if they fit, else in the next
    call on a machine kept warm; a fresh machine trains it again, seeded); an evaluation when its time fits. While
    the other lane is busy both are costed :data:`OVERLAP_SLOWDOWN` times longer. An evaluation that runs out of GPU
    memory beside a fine-tune, or a fine-tune that fails beside an evaluation, ends the overlap: the rest of the
    call runs one piece at a time (:func:`run`, in its order: the failed piece after the evaluations ready)."""
    from concurrent.futures import ThreadPoolExecutor

    deadline = time.monotonic() + 60 * minutes
    landed = 0
    warm_machine = (scratch / WARM_MARK).is_file()
    training = None  # the fine-tune in flight: [piece, future, start, whether an evaluation ran beside it]
    stop_training = False  # no fine-tune starts after one that did not fit or was cut

    def finish_training() -> bool:
        """Wait for the fine-tune in flight and land it; False when it failed beside an evaluation."""
        nonlocal training, stop_training, landed
        piece, future, started, crowded = training
        training = None
        try:
            result, ended = future.result()
        except SystemExit as failure:
            if not crowded:
                raise
            log(f"longctx_experiment: {piece.name} failed beside an evaluation "
                f"({(str(failure).splitlines() or ['no message'])[0]}); the rest of this call runs one piece at a time")
            return False
        # timed to when it ended, not to when this thread came to land it
        if not _timed(piece, result, ended - started, scratch, log):
            stop_training = True
            return True
        if crowded and "seconds" in result:
            result["overlapped"] = True
        ledger.land(piece.name, {**result, **_where(device)})
        landed += 1
        _mark_landed(piece, started, scratch, log)
        return True

    def timed_fine_tune(piece: Piece) -> tuple[dict | None, float]:
        return fine_tune(piece, ledger, scratch, deadline, device), time.perf_counter()

    def serial_rest() -> int:
        left = (deadline - time.monotonic()) / 60
        return run(ledger, scratch, left, device, keep_models=True, log=log) if left > 0 else 0

    with ThreadPoolExecutor(max_workers=1) as lane:
        while True:
            if training is not None and training[1].done() and not finish_training():
                landed += serial_rest()
                break
            warm = landed > 0 or warm_machine
            ready, waiting = next_pieces(ledger)
            ready = [p for p in ready if training is None or p.name != training[0].name]
            if _retrain_lost_models(ledger, ready, scratch, log):
                continue
            train = next((p for p in ready if p.kind == "train"), None)
            evaluation = next((p for p in ready if p.kind != "train"), None)
            if training is None and train is not None and not stop_training:
                needs, left = OVERLAP_SLOWDOWN * _estimate(ledger, train, warm=warm, alone=True), \
                    deadline - time.monotonic()
                # a ready evaluation that fits alone but not slowed beside a fine-tune goes first, alone
                crowds = evaluation is not None and left < OVERLAP_SLOWDOWN * _estimate(ledger, evaluation, warm=warm)
                if left >= needs and not crowds:
                    log(f"longctx_experiment: {train.name} ({len(ready)} ready; trains beside the evaluations)")
                    training = [train, lane.submit(timed_fine_tune, train), time.perf_counter(), False]
                elif left < needs:
                    log(f"longctx_experiment: {left / 60:.1f} min left, {train.name} needs about {needs / 60:.1f}; "
                        "no fine-tune starts after this")
                    stop_training = True
            if evaluation is not None:
                needs = _estimate(ledger, evaluation, warm=warm) * (OVERLAP_SLOWDOWN if training else 1.0)
                left = deadline - time.monotonic()
                if left >= needs:
                    beside = training[0].name if training else None
                    log(f"longctx_experiment: {evaluation.name}" + (f" (beside {beside})" if beside else ""))
                    if training:
                        training[3] = True
                    started, outcome = time.perf_counter(), None
                    try:
                        outcome = evaluate(evaluation, ledger, device)
                    except RuntimeError as error:  # torch.OutOfMemoryError, or another kernel's allocation
                        if training is None or "out of memory" not in str(error).lower():
                            raise
                    if outcome is None:  # out of memory beside the fine-tune (the frames that held it are gone)
                        release_memory()
                        log(f"longctx_experiment: {evaluation.name} ran out of GPU memory beside {beside}; the "
                            "rest of this call runs one piece at a time")
                        finish_training()
                        landed += serial_rest()
                        break
                    result, records = outcome
                    ledger.land(evaluation.name, {**result, **({"overlapped": True} if beside else {}),
                                                  **_where(device)}, records)
                    release_memory()
                    landed += 1
                    _mark_landed(evaluation, started, scratch, log)
                    continue
                if training is None:
                    log(f"longctx_experiment: {left / 60:.1f} min left, {evaluation.name} needs about "
                        f"{needs / 60:.1f}; stopping here")
                    break
            if training is not None:  # nothing to evaluate beside it: wait, its own evaluations come next
                if not finish_training():
                    landed += serial_rest()
                    break
                continue
            if not ready:
                log("longctx_experiment: nothing left to run" + (f" ({'; '.join(waiting)})" if waiting else ""))
            break
    if not keep_models:
        prune(ledger)
    return landed


def release_memory() -> None:
    """Give the GPU memory an evaluation cached back to the driver. Evaluations run in this process and fine-tunes
    in a child: PyTorch's caching allocator kept 64 GiB after a test evaluation at 8k tokens, and the full
    fine-tune that came next ran out of memory beside it (2026-11-24)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _where(device: str) -> dict:
    """Where and when a piece ran (the report lists the machines)."""
    import torch

    name = torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or "CPU")
    return {"device": name, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}


def _estimate(ledger: Ledger, piece: Piece, call: float = float("inf"), warm: bool = False,
              alone: bool = False) -> float:
    """Seconds a piece is expected to take, with a margin: a fine-tune counts the evaluations that follow it, or
    only the first of them when all of them would not fit in a ``call`` of that many seconds (the treatment's test,
    beta-off test and importance probe may not fit with its fine-tune; the model then waits in ``--scratch``, or
    trains once more on a fresh machine, for the rest). A fine-tune's time is its own arm's when that arm has one.
    The call's first piece (``warm`` False) is costed at the slowest of its kind so far, which includes the
    processes that compiled Triton's kernels on a fresh machine (up to twice as long on the H100); later pieces
    find the kernels compiled and are costed at the median. 0 for the first of its kind, which is tried.
    ``alone``: a fine-tune without its evaluations."""
    def typical(kind: str, arm: str | None = None) -> float:
        times = [p["seconds"] for n, p in ledger.pieces.items() if n.startswith(kind + "/") and "seconds" in p
                 and (arm is None or n.startswith(f"{kind}/{arm}/"))]
        if not times:
            return typical(kind) if arm is not None else 0.0
        return statistics.median(times) if warm else max(times)

    def with_evaluations(seconds: float) -> float:
        return 1.1 * (typical("train", piece.arm) + seconds) + 10

    if piece.kind == "train":
        if not typical("train"):
            return 0.0
        if alone:  # the fine-tune without its evaluations
            return with_evaluations(0.0)
        search = (piece.seed == 0 and not piece.ablation and ARMS[piece.arm].grid is not None
                  and chosen_rates(ledger, piece.arm) is None)  # else a chosen model trained again: its tests follow
        if search:
            evaluations = typical("val")
        elif piece.arm == "beta-lora" and not piece.ablation:  # test, test at beta scale 0, importance
            evaluations = 2 * typical("test") + typical("importance")
            if with_evaluations(evaluations) > call:
                evaluations = typical("test")
        else:
            evaluations = typical("test")
        return with_evaluations(evaluations)
    seconds = typical(piece.kind)
    return 1.2 * seconds + 5 if seconds else 0.0


def prune(ledger: Ledger) -> None:
    """Delete the fine-tuned models that no evaluation will need: every evaluation of theirs has landed, and a
    search's seed-0 model only once its arm's choice is made (the chosen one's test comes after the search)."""
    ready, _ = next_pieces(ledger)
    pending = {p.train for p in ready if p.train}
    for name, piece in ledger.pieces.items():
        model = Path(piece.get("model", ""))
        if not (name.startswith("train/") and model.name == "final" and model.is_dir()) or name in pending:
            continue
        _, arm, tag, seed = name.split("/")
        searching = (seed == "seed0" and not tag.startswith(("ablation-", "chosen")) and ARMS[arm].grid is not None
                     and chosen_rates(ledger, arm) is None)
        if not searching:
            shutil.rmtree(model.parent, ignore_errors=True)


def plan_text(ledger: Ledger) -> str:
    ready, waiting = next_pieces(ledger)
    done = sorted(ledger.pieces)
    lines = [f"longctx_experiment: {len(done)} pieces landed in {ledger.work}"]
    lines += [f"  done  {name}" for name in done]
    lines += [f"  next  {piece.name}" for piece in ready]
    lines += [f"  waits {line}" for line in waiting]
    return "\n".join(lines)


def base_bar(base: str) -> bool | None:
    """Whether the base met its recall bar, as ``scripts/pretrain_base.py`` recorded it (None: not recorded)."""
    summary = Path(base) / "training" / "summary.json"
    try:
        return bool(json.loads(summary.read_text())["bar"]["met"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def settings_from(args) -> Settings:
    def numbers(text: str) -> list[float]:
        return [float(x) for x in text.split(",") if x]

    settings = Settings()
    for name in ("base", "steps", "batch_size", "train_length", "pretrain_length", "per_bucket",
                 "validation_per_task", "nll_windows", "nll_multiple", "importance_distance", "eval_batch",
                 "resamples"):
        value = getattr(args, name)
        if value is not None:
            setattr(settings, name, value)
    if args.base is not None and Path(args.base).exists():  # a local base: relative to the repository if inside it
        resolved = Path(args.base).resolve()
        settings.base = str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(resolved)
    for name in ("steps", "batch_size", "train_length", "pretrain_length", "per_bucket", "validation_per_task",
                 "nll_windows", "nll_multiple", "importance_distance", "eval_batch", "resamples"):
        if getattr(settings, name) < 1:
            raise SystemExit(f"longctx_experiment: --{name.replace('_', '-')} must be at least 1")
    if args.buckets:
        from palimpsa.upgrade.evaluate.distance import parse_buckets

        try:
            settings.buckets = tuple(parse_buckets(args.buckets))
        except ValueError as error:
            raise SystemExit(f"longctx_experiment: --buckets {error}") from None
    if args.tasks:
        from palimpsa.upgrade.evaluate.distance import check_tasks

        settings.tasks = tuple(t for t in args.tasks.split(",") if t)
        try:
            check_tasks(settings.tasks)
        except ValueError as error:
            raise SystemExit(f"longctx_experiment: --tasks: {error}") from None
    if args.arms:
        settings.arms = tuple(a for a in args.arms.split(",") if a)
        unknown = [a for a in settings.arms if a not in ARMS]
        if unknown:
            raise SystemExit(f"longctx_experiment: unknown arm {unknown[0]!r}; the arms are {', '.join(ARMS)}")
    if args.ablations is not None:
        settings.ablations = tuple(a for a in args.ablations.split(",") if a)
        unknown = [a for a in settings.ablations if a not in ABLATIONS]
        if unknown:
            raise SystemExit(f"longctx_experiment: unknown ablation {unknown[0]!r}; the ablations are "
                             f"{', '.join(ABLATIONS)}")
    for option, items in (("--seeds", args.seeds or []), ("--grid", args.grid or [])):
        for item in items:
            arm, _, value = item.partition("=")
            try:
                if arm not in ARMS:
                    raise ValueError
                if option == "--seeds":
                    settings.seeds[arm] = int(value)
                    if settings.seeds[arm] < 1:
                        raise ValueError
                else:
                    settings.grids[arm] = numbers(value)
                    if not settings.grids[arm] or not all(0 < r <= 1 for r in settings.grids[arm]):
                        raise ValueError
            except ValueError:
                example = "beta-lora=5" if option == "--seeds" else "beta-lora=3e-3,1e-2,3e-2 (rates in (0, 1])"
                raise SystemExit(f"longctx_experiment: {option} {item!r}: give ARM=VALUE with an arm of "
                                 f"{', '.join(ARMS)}, e.g. {example}") from None
    if not settings.validation_buckets() or not settings.beyond():
        raise SystemExit(f"longctx_experiment: the buckets {[list(b) for b in settings.buckets]} need one within the "
                         f"fine-tuning length {settings.train_length} (validation) and one from it on (the contrast)")
    for arm in settings.grids:
        if ARMS[arm].grid is None:
            raise SystemExit(f"longctx_experiment: --grid {arm}: that arm takes {ARMS[arm].rates_from}'s rates and "
                             "searches none")
        settings.grids[arm] = sorted(set(settings.grids[arm]))
    for task in (*settings.tasks, *VALIDATION_TASKS):
        if task.startswith("mqar") and 2 * int(task.rsplit("_", 1)[1]) >= settings.buckets[0][1]:
            raise SystemExit(f"longctx_experiment: {task}'s pairs take more tokens than the first bucket "
                             f"{settings.buckets[0][0]}-{settings.buckets[0][1]} holds; fewer pairs or larger buckets")
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("plan", "run", "report"),
                        help="plan: what is done and what comes next; run: the next pieces for --minutes; report: "
                        "render longctx.md, .json and plots into --output")
    parser.add_argument("--work", type=Path, default=ROOT / "docs" / "results" / "longctx-runs",
                        help="the ledger and the per-prompt scores (small; committed)")
    parser.add_argument("--scratch", type=Path, default=ROOT / "runs" / "longctx",
                        help="the fine-tunes while they are needed")
    parser.add_argument("--keep-models", action="store_true", help="keep fine-tuned models after their evaluations")
    parser.add_argument("--allow-unmet-bar", action="store_true",
                        help="run on a base whose recorded recall bar is not met (a trial, not the protocol)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results", help="where report writes")
    parser.add_argument("--minutes", type=float, default=9.0, help="run: time for this call (default 9)")
    parser.add_argument("--device", default=None, help="default: cuda when available")
    parser.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                        help="run: train the next fine-tune beside the evaluations, two lanes on one GPU (default: "
                        "on a GPU)")
    group = parser.add_argument_group("settings (fixed by the first call on a --work; the protocol's by default)")
    group.add_argument("--base", default=None, help=f"the pretrained base (default {BASE.relative_to(ROOT)})")
    for name, kind in (("steps", int), ("batch-size", int), ("train-length", int), ("pretrain-length", int),
                       ("per-bucket", int), ("validation-per-task", int), ("nll-windows", int),
                       ("nll-multiple", int), ("importance-distance", int), ("eval-batch", int),
                       ("resamples", int)):
        group.add_argument(f"--{name}", type=kind, default=None,
                           help=f"default {getattr(Settings(), name.replace('-', '_'))}")
    group.add_argument("--buckets", default=None, help="distance bucket edges, comma list (default "
                       "256,512,1024,2048,4096,8192)")
    group.add_argument("--tasks", default=None, help=f"recall tasks, comma list (default {','.join(RECALL_TASKS)})")
    group.add_argument("--arms", default=None, help=f"comma list (default all: {', '.join(ARMS)})")
    group.add_argument("--ablations", default=None, help=f"comma list, empty for none (default all: "
                       f"{', '.join(ABLATIONS)})")
    group.add_argument("--seeds", action="append", metavar="ARM=N", help="seeds of an arm (repeatable)")
    group.add_argument("--grid", action="append", metavar="ARM=R1,R2", help="an arm's first grid (repeatable)")
    args = parser.parse_args(argv)
    configured = any(getattr(args, n) is not None for n in (
        "base", "steps", "batch_size", "train_length", "pretrain_length", "per_bucket", "validation_per_task",
        "nll_windows", "nll_multiple", "importance_distance", "eval_batch", "resamples", "buckets", "tasks", "arms",
        "ablations", "seeds", "grid"))
    settings = settings_from(args)
    if args.action == "run" and not (Path(settings.base_path()) / "config.json").is_file() and not (
            args.work / "ledger.json").is_file():
        raise SystemExit(f"longctx_experiment: no base model at {settings.base}; pretrain it first "
                         "(scripts/pretrain_base.py) or give --base")
    ledger = Ledger(args.work, settings if (configured or not (args.work / "ledger.json").is_file()) else None)
    if args.action == "run":
        bar = base_bar(ledger.settings.base_path())
        if bar is False and not args.allow_unmet_bar:
            raise SystemExit(f"longctx_experiment: the base {ledger.settings.base} does not meet its recall bar "
                             "(training/summary.json); the protocol does not run on it (--allow-unmet-bar for a "
                             "trial run)")
        if bar is None:
            print(f"longctx_experiment: note: {ledger.settings.base} records no recall bar "
                  "(training/summary.json); a trial run, not the protocol's", flush=True)
    if args.action == "plan":
        print(plan_text(ledger))
        return 0
    if args.action == "report":
        if not ledger.pieces:
            raise SystemExit(f"longctx_experiment: nothing has landed in {args.work}; run first")
        state = report(ledger, args.output)
        print(f"longctx_experiment: wrote {args.output / 'longctx.md'} ({len(ledger.pieces)} pieces; verdict "
              f"{'decided' if state['verdict']['decided'] else 'not yet decided'})")
        return 0
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    overlap = args.overlap if args.overlap is not None else device.startswith("cuda")
    if overlap:  # two processes' caches on one GPU: grow segments in place instead of fragmenting (66 GB -> 26 GB)
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    ledger.save()
    print(plan_text(ledger), flush=True)
    landed = run(ledger, args.scratch, args.minutes, device, args.keep_models,
                 log=lambda line: print(line, flush=True), overlap=overlap)
    print(f"longctx_experiment: {landed} pieces landed this call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
