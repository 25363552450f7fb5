"""``finetune-model RECIPE [key=value ...] [--resume]``: fine-tune an upgraded model as a recipe says.

Also runs as ``python -m palimpsa.upgrade.cli.finetune_model`` so that ``accelerate launch`` can start it on several
GPUs:

    accelerate launch --config_file recipes/accelerate/fsdp-8gpu.yaml -m palimpsa.upgrade.cli.finetune_model RECIPE ...
"""

from __future__ import annotations

import argparse
import shlex

from ..errors import Interrupted, PalimpsaError
from ..train.layout import latest_checkpoint
from ..train.recipe import load_recipe
from ..train.trainer import Trainer
from .common import guarded

EPILOG = """\
examples:
  finetune-model recipes/tiny-cpu.yaml
  finetune-model recipes/mamba2-2.7b-8layers-16k.yaml data.path=./books/ output_dir=runs/a
  finetune-model recipes/mamba2-2.7b-8layers-16k.yaml output_dir=runs/a --resume

Overrides use dotted keys with YAML values (train.max_steps=200, optim.lr=3e-4, trainable.mode=beta+lora).
The recipe is validated before any work: unknown keys name the nearest valid key. The run writes recipe.yaml,
metrics.jsonl, TensorBoard logs, checkpoints/step-*/ (full state, resumable) and final/ (a model directory).
See docs/recipes.md.
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="finetune-model", description="Fine-tune a Palimpsa model from a "
                                     "recipe.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", metavar="RECIPE", help="recipe YAML file (see recipes/)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in output_dir from its last checkpoint")
    parser.add_argument("--check", action="store_true", help="validate the recipe, print it resolved, and stop")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    bad = [item for item in args.overrides if "=" not in item]
    if bad:
        raise PalimpsaError(f"cannot read {bad[0]!r}; overrides are key=value, e.g. train.max_steps=100")
    recipe = load_recipe(args.recipe, args.overrides)
    if args.check:
        print(recipe.to_yaml(), end="")
        return 0
    trainer = Trainer(recipe, resume=args.resume)
    say = print if trainer.is_main else (lambda *_args: None)  # one plan, not one per process
    say(f"Plan\n  model       {recipe.model.path}"
          + (f" (upgrading layers {recipe.model.upgrade_layers})" if recipe.model.upgrade_layers else "")
          + f"\n  trainable   {recipe.trainable.mode}\n  data        "
          f"{', '.join(s.type + ':' + (s.path or s.name or s.task or '') for s in recipe.data.resolved_sources())}, "
          f"{recipe.data.batch_size} x {recipe.data.seq_len} tokens per micro-batch x {recipe.train.grad_accum} "
          f"accumulation x {trainer.accelerator.num_processes} process(es)"
          f"{', state passing' if recipe.data.state_passing else ', packed'}\n"
          f"  steps       {recipe.train.max_steps} ({recipe.schedule.type}, warmup {recipe.schedule.warmup_steps}, "
          f"lr {recipe.optim.lr:g}, beta lr {recipe.optim.beta_lr or recipe.optim.lr:g})\n"
          f"  output      {recipe.output_dir}" + (" (resuming)" if args.resume else ""))
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        if latest_checkpoint(trainer.output_dir) is not None:
            again = "resume with: " + shlex.join(["finetune-model", args.recipe, *args.overrides, "--resume"])
        else:
            again = "start it again with: " + shlex.join(["finetune-model", args.recipe, *args.overrides])
        raise Interrupted(f"{trainer.written()}; {again}") from None
    say(f"done: step {summary['step']}, eval {summary['eval']}, final model {summary['final']}")
    return 0


main = guarded(run, "finetune-model")

if __name__ == "__main__":
    main()
