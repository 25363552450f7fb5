"""Which form of the recall data makes recall emerge soonest in the base? Trains variants of
recipes/pretrain-base.yaml side by side on one GPU for the same wall-clock time, then checks each one's recall bar at
1x and 2x, and writes one table.

    python scripts/pretrain_base_variants.py --minutes 7 --out runs/base-variants

Variants (each a transformation of the recipe, nothing else changed):

- ``answer``: the recipe as it is (recall documents with the loss on their answers, a third of the tokens text);
- ``answer-x8``: the same, the answers weighing 8 in the loss (``loss_weight``), so that the few answer tokens
  carry about a third of the gradient instead of a few percent;
- ``recall-only``: no text (the standard-library source's weight 1e-6), answers only;
- ``full``: the recall documents with the loss on every token.

The runs share the GPU (each a process of its own, its documents made by ``data.workers`` processes); their
step counts differ with how the GPU is shared, and the table says how many steps each made. Checkpoints every 250
steps; the bar is evaluated on each run's newest checkpoint (``pretrain_base.evaluate_bar``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pretrain_base  # noqa: E402
from pretrain_base import RECIPE, TASKS, evaluate_bar  # noqa: E402

VARIANTS = ("answer", "answer-x8", "recall-only", "full")


def variant_recipe(base: dict, name: str, workers: int) -> dict:
    recipe = copy.deepcopy(base)
    recipe["data"]["workers"] = workers
    recipe["checkpoint"] = {"every": 250, "keep": 1}
    recipe["eval"]["every"] = 1000
    recall = [s for s in recipe["data"]["sources"] if s.get("type") == "synthetic"]
    if name == "answer-x8":
        for source in recall:
            source["loss_weight"] = 8.0
    elif name == "recall-only":
        for source in recipe["data"]["sources"]:
            if source.get("type") == "stdlib":
                source["weight"] = 1e-6
    elif name == "full":
        for source in recall:
            source["loss"] = "all"
    elif name != "answer":
        raise SystemExit(f"pretrain_base_variants: unknown variant {name}; choose from {', '.join(VARIANTS)}")
    return recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list (default: all)")
    parser.add_argument("--minutes", type=float, default=7.0, help="training time of every variant (default 7)")
    parser.add_argument("--workers", type=int, default=2, help="data.workers of each run (default 2)")
    parser.add_argument("--samples", type=int, default=40, help="prompts per task and length for the bar")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "base-variants")
    parser.add_argument("--lengths", default="512,1024", help="bar lengths, comma list (default 512,1024)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides for every variant")
    args = parser.parse_args(argv)
    pretrain_base.LENGTHS[:] = [int(n) for n in args.lengths.split(",")]
    names = [n for n in args.variants.split(",") if n]
    base = yaml.safe_load(RECIPE.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    processes = {}
    for name in names:
        run = args.out / name
        recipe_path = args.out / f"{name}.yaml"
        recipe_path.write_text(yaml.safe_dump(variant_recipe(base, name, args.workers), sort_keys=False))
        command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(recipe_path),
                   f"output_dir={run}", *args.overrides]
        log = open(args.out / f"{name}.log", "w")
        print(f"pretrain_base_variants: {name}: {' '.join(command)}", flush=True)
        processes[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"}), log)
    deadline = time.monotonic() + 60 * args.minutes
    while time.monotonic() < deadline and any(p.poll() is None for p, _ in processes.values()):
        time.sleep(5)
    for process, _ in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process, log in processes.values():
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()

    import torch
    from palimpsa.upgrade.train.layout import latest_checkpoint

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {}
    for name in names:
        run = args.out / name
        checkpoint = latest_checkpoint(run)
        if checkpoint is None:
            results[name] = {"error": f"no checkpoint (see {name}.log)"}
            continue
        step = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        report = evaluate_bar(checkpoint / "model", args.samples, device)
        results[name] = {"step": step, "tokens_per_s": sum(rates[-10:]) / max(1, len(rates[-10:])),
                         "eval_nll": next((r["eval_nll"] for r in reversed(rows) if "eval_nll" in r), None),
                         "bar": report}
        print(f"pretrain_base_variants: {name} at step {step}: " + ", ".join(
            f"{t} {report['accuracy'][t][0]:.2f}" for t in TASKS), flush=True)
    (args.out / "variants.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| variant | steps | tokens/s | " + " | ".join(f"{t} 1x / 2x" for t in TASKS) + " |",
             "|---|---|---|" + "---|" * len(TASKS)]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | {result['error']} |")
            continue
        accuracy = result["bar"]["accuracy"]
        cells = [" / ".join("-" if v is None else f"{v:.2f}" for v in accuracy[t][:2]) for t in TASKS]
        lines.append(f"| {name} | {result['step']} | {result['tokens_per_s'] / 1e3:.0f}K | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    (args.out / "variants.md").write_text(table + "\n")
    print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
