"""The layout of a training run's directory (``output_dir``), in one place: the trainer writes it, ``--resume`` and
export-model read it.

    recipe.yaml            the resolved recipe (a resumed run must match it)
    metrics.jsonl          one object per logged step: step, loss, lr, tokens_per_s, grad_norm, ... and eval rows
    eval_summary.json      the latest evaluation (its step, held-out NLL, passkey accuracy, importance figures)
    tensorboard/           TensorBoard event files (logging.tensorboard)
    checkpoints/step-NNNNNNN/
        state/             accelerate state: model, optimizer, scheduler, RNG
        trainer_state.json step, data position, and the sha256 of every file under state/
        model/             a loadable model directory (LoRA merged)
    final/                 the final model directory, with a card and a generation config (from_pretrained /
                           export-model load it)

Checkpoints and ``final/`` are written under ``.partial`` names and renamed when complete.
"""

from __future__ import annotations

from pathlib import Path

RECIPE = "recipe.yaml"
METRICS = "metrics.jsonl"
EVAL_SUMMARY = "eval_summary.json"
TENSORBOARD = "tensorboard"
CHECKPOINTS = "checkpoints"
CHECKPOINT_PREFIX = "step-"
TRAINER_STATE = "trainer_state.json"
FINAL = "final"
PARTIAL = ".partial"


def checkpoint_directory(run: Path, step: int) -> Path:
    return run / CHECKPOINTS / f"{CHECKPOINT_PREFIX}{step:07d}"


def partial(directory: Path) -> Path:
    """Where ``directory`` (a checkpoint, ``final/``) is written before it is renamed into place."""
    return directory.with_name(directory.name + PARTIAL)


def partial_directories(run: Path) -> list[Path]:
    """What a killed run was writing (``checkpoints/step-N.partial``, ``final.partial``): never complete."""
    return [*run.glob(f"{CHECKPOINTS}/{CHECKPOINT_PREFIX}*{PARTIAL}"), partial(run / FINAL)]


def describe_run(run: Path) -> str:
    """What a run has on disk, for a message after an interruption: the files in ``run`` and the newest complete
    checkpoint."""
    if not run.is_dir() or not any(run.iterdir()):
        return "nothing was written"
    names = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in run.iterdir()))
    checkpoint = latest_checkpoint(run)
    last = f"the last complete checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written yet"
    return f"{run} holds {names}; {last}"


def complete_checkpoints(run: Path) -> list[Path]:
    """The run's renamed (so completely written) checkpoints, oldest first."""
    folder = run / CHECKPOINTS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(f"{CHECKPOINT_PREFIX}*") if (p / TRAINER_STATE).is_file()
                  and not p.name.endswith(PARTIAL))


def latest_checkpoint(run: Path) -> Path | None:
    complete = complete_checkpoints(run)
    return complete[-1] if complete else None


def run_model(run: Path) -> Path | None:
    """The model directory a run stands for: ``final/``, else the newest complete checkpoint's ``model/``; None when
    ``run`` holds neither."""
    if (run / FINAL).is_dir():
        return run / FINAL
    models = sorted(p for p in (run / CHECKPOINTS).glob(f"{CHECKPOINT_PREFIX}*/model")
                    if not p.parent.name.endswith(PARTIAL) and (p / "config.json").is_file())
    return models[-1] if models else None


def run_of(model_directory: Path) -> Path | None:
    """The run a model directory was written by (it is the run's ``final/`` or a checkpoint's ``model/``), or None."""
    if model_directory.name == FINAL:
        return model_directory.parent
    checkpoint = model_directory.parent
    if model_directory.name == "model" and checkpoint.name.startswith(CHECKPOINT_PREFIX) \
            and checkpoint.parent.name == CHECKPOINTS:
        return checkpoint.parent.parent
    return None
