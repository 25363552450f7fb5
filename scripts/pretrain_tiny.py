"""Pretrain the embedded default model (recipes/pretrain-tiny.yaml) within a time budget and export it.

    python scripts/pretrain_tiny.py --output upgrade/assets/tiny-mamba2 --minutes 4 --force

1. times a short calibration run of the recipe (compilation and warm-up excluded) to measure tokens/s here;
2. sets ``train.max_steps`` so that training fits ``--minutes`` (the cosine schedule then spans the whole run),
   with evaluations and checkpoints spread over it;
3. trains (``finetune-model``), exports the final model in mamba_ssm format with its tokenizer
   (``export-model --to-mamba2``), and adds the training log: ``training/metrics.jsonl``, ``training/recipe.yaml``
   and ``training/summary.json`` (steps, tokens, seconds, Python version: the corpus is that version's standard
   library).

Extra ``KEY=VALUE`` arguments override the recipe in both runs (e.g. ``model.scratch.n_layer=2`` for a smoke test).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tokens_per_second(metrics: Path, skip: int) -> float:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rates = [row["tokens_per_s"] for row in rows if "tokens_per_s" in row and row["step"] > skip]
    if not rates:
        raise SystemExit(f"pretrain_tiny: the calibration run logged no throughput in {metrics}")
    return sum(rates) / len(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides")
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "pretrain-tiny.yaml"))
    parser.add_argument("--output", required=True, help="model directory to write (mamba_ssm format)")
    parser.add_argument("--run-dir", default="runs/pretrain-tiny", help="training run directory")
    parser.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    parser.add_argument("--calibration-steps", type=int, default=40)
    parser.add_argument("--max-steps", type=int, default=20000, help="upper bound on the steps chosen")
    parser.add_argument("--force", action="store_true", help="replace --output and --run-dir")
    args = parser.parse_args(argv)

    from palimpsa.upgrade.cli.finetune_model import run as finetune
    from palimpsa.upgrade.export.export import export_model
    from palimpsa.upgrade.train.recipe import load_recipe

    run_dir = Path(args.run_dir)
    if run_dir.exists():
        if not args.force:
            raise SystemExit(f"pretrain_tiny: {run_dir} exists; pass --force to replace it")
        shutil.rmtree(run_dir)
    recipe = load_recipe(args.recipe, args.overrides)
    step_tokens = recipe.data.batch_size * recipe.data.seq_len * recipe.train.grad_accum

    with tempfile.TemporaryDirectory() as scratch:
        calibration = Path(scratch) / "calibration"
        steps = args.calibration_steps
        finetune([args.recipe, *args.overrides, f"output_dir={calibration}", f"train.max_steps={steps}",
                  f"train.log_every={max(1, steps // 4)}", f"schedule.warmup_steps={steps // 2}", "eval.every=0",
                  "checkpoint.every=0", "logging.tensorboard=false"])
        rate = tokens_per_second(calibration / "metrics.jsonl", skip=steps // 4)
    max_steps = int(min(args.max_steps, max(10, args.minutes * 60 * rate / step_tokens)))
    max_steps -= max_steps % 10 if max_steps > 100 else 0
    every = max(1, max_steps // 5)
    print(f"pretrain_tiny: {rate:,.0f} tokens/s measured -> {max_steps} steps of {step_tokens} tokens "
          f"({max_steps * step_tokens / 1e6:.1f}M tokens) for {args.minutes:g} minutes", flush=True)

    started = time.perf_counter()
    finetune([args.recipe, *args.overrides, f"output_dir={run_dir}", f"train.max_steps={max_steps}",
              f"eval.every={every}", f"checkpoint.every={max(every, max_steps // 2)}",
              f"schedule.warmup_steps={min(recipe.schedule.warmup_steps, max(1, max_steps // 10))}"])
    seconds = time.perf_counter() - started

    export_model(run_dir, args.output, to_mamba2=True, force=args.force, log=print)
    output = Path(args.output)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evaluations = [row for row in rows if "eval_nll" in row]
    summary = {"steps": max_steps, "tokens": max_steps * step_tokens, "train_seconds": round(seconds, 1),
               "calibrated_tokens_per_s": round(rate), "python": platform.python_version(),
               "final_eval": evaluations[-1] if evaluations else None,
               "recipe": Path(args.recipe).name, "overrides": args.overrides}
    log_dir = output / "training"
    log_dir.mkdir(exist_ok=True)
    shutil.copy2(run_dir / "metrics.jsonl", log_dir / "metrics.jsonl")
    shutil.copy2(run_dir / "recipe.yaml", log_dir / "recipe.yaml")
    (log_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
