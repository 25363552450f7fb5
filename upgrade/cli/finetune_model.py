"""``finetune-model RECIPE [key=value ...] [--resume]``: fine-tune an upgraded model as a recipe says.

Also runs as ``python -m palimpsa.upgrade.cli.finetune_model`` so that ``accelerate launch`` and ``torchrun`` can
start it as several data-parallel processes, on GPUs or on the CPU:

    accelerate launch --config_file recipes/accelerate/fsdp-8gpu.yaml -m palimpsa.upgrade.cli.finetune_model RECIPE ...
    torchrun --nproc_per_node 2 -m palimpsa.upgrade.cli.finetune_model RECIPE ...
    accelerate launch --cpu --num_processes 2 -m palimpsa.upgrade.cli.finetune_model RECIPE ...
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..errors import Interrupted, PalimpsaError
from ..train.layout import describe_run, latest_checkpoint
from .common import guarded

EPILOG = """\
examples:
  finetune-model recipes/tiny-cpu.yaml
  finetune-model recipes/mamba2-2.7b-8layers-16k.yaml data.path=./books/ output_dir=runs/a
  finetune-model recipes/mamba2-2.7b-8layers-16k.yaml output_dir=runs/a --resume

Overrides use dotted keys with YAML values (train.max_steps=200, optim.lr=3e-4, trainable.mode=beta+lora).
The recipe is validated before any work: unknown keys name the nearest valid key, and the paths it reads must
exist (relative ones in the recipe file are read from its folder, on the command line from the working
directory). A warmup longer than a short run (train.max_steps=5) becomes a tenth of the run, with a note.
The run writes recipe.yaml, metrics.jsonl, TensorBoard logs, checkpoints/step-*/ (full state, resumable) and
final/ (a model directory). See docs/recipes.md.
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
    from ..train.recipe import check_paths, load_recipe

    recipe = load_recipe(args.recipe, args.overrides)
    check_paths(recipe)
    if args.check:
        print("".join(f"# note: {note}\n" for note in recipe.notes) + recipe.to_yaml(), end="")
        return 0
    from ..train.processes import processes_asked_of_accelerate, run_as_processes

    processes = processes_asked_of_accelerate()
    if processes > 1:  # accelerate launch --cpu --num_processes N started this one process alone
        print(f"finetune-model: accelerate launch --cpu starts one process; starting the {processes} data-parallel "
              "processes asked for with torch.distributed.run", file=sys.stderr, flush=True)
        return run_as_processes(processes)
    # torch and transformers load here, once the recipe is known to be valid
    from ..train.trainer import Trainer

    try:
        trainer = Trainer(recipe, resume=args.resume)  # prints the plan, then loads the model and the data
        summary = trainer.train()
    except KeyboardInterrupt:
        output_dir = Path(recipe.output_dir).expanduser()
        if latest_checkpoint(output_dir) is not None:
            again = "resume with: " + shlex.join(["finetune-model", args.recipe, *args.overrides, "--resume"])
        else:
            again = "start it again with: " + shlex.join(["finetune-model", args.recipe, *args.overrides])
        raise Interrupted(f"{describe_run(output_dir)}; {again}") from None
    if trainer.is_main:  # one summary, not one per process
        print(f"done: step {summary['step']}, eval {summary['eval']}, final model {summary['final']}")
    return 0


main = guarded(run, "finetune-model")

if __name__ == "__main__":
    main()
