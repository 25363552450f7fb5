"""Which form of the recall data makes recall emerge soonest in the base? Trains variants of
recipes/pretrain-base.yaml side by side on one GPU for the same wall-clock time, then checks each one's recall bar at
1x and 2x, and writes one table.

    python scripts/pretrain_base_variants.py --minutes 7 --out runs/base-variants

Variants (each a transformation of the recipe, nothing else changed; the first four were raced on 2026-11-24
against the recipe as it was then, with the loss on the answers alone):

- ``answer``: the recipe as it is (recall documents with the loss on their answers, a third of the tokens text);
- ``answer-x8``: the same, the answers weighing 8 in the loss (``loss_weight``), so that the few answer tokens
  carry about a third of the gradient instead of a few percent;
- ``recall-only``: no text (the standard-library source's weight 1e-6), answers only;
- ``full``: the recall documents with the loss on every token.

Variants that ask why MQAR does not emerge (the recipe as it is now: every token in the loss, answers weighing 4);
with ``--init-pack DIR`` they go on from a packed run (``pretrain_base.py --pack``) instead of from scratch, with a
fresh AdamW, ``--lr`` after a 100-step warmup, held constant:

- ``continue``: the recipe's mixture unchanged (the control);
- ``mqar-heavy``: MQAR's documents drawn 6x as often and MQAR-gap's 3x, from 2 pairs up;
- ``mqar-only``: MQAR and MQAR-gap alone (2-64 and 2-32 pairs): can the model learn them at all?
- ``mqar-small``: MQAR alone with 2-16 pairs, the easiest form;
- ``mix-small``: the mixture with MQAR's documents from 2-16 pairs, drawn twice as often, MQAR-gap's from 2-8;
- ``mix-small-x3``: the same, MQAR drawn 6x and MQAR-gap 3x as often as in the recipe;
- ``text-recall``: NIAH in the FwPKM form and repeat-after-gap alone (recall in natural text);
- ``text-heavy``: the mixture with NIAH-FwPKM's and repeat's documents drawn 3x as often;
- ``niah-easy``: NIAH in the FwPKM form alone with 2-5 needles (the evaluation has 5), the form in which key
  matching should start as MQAR's did in ``mqar-small``;
- ``niah-mix``: ``text-heavy`` with NIAH-FwPKM's documents from 2-5 needles: the easy form kept in the mixture;
- ``niah-multi``: NIAH in the FwPKM form alone with 2-5 needles, 2-4 of them asked in turn at the document's end,
  each question followed by its answer (every answer in the loss): several key matches per document where
  ``niah-easy`` has one, so a document's other needles are wrong answers that the loss sees;
- ``multi-mix``: ``text-heavy`` with NIAH-FwPKM's documents from 2-5 needles, 1-3 of them asked;
- ``multi-anneal``: ``multi-mix`` under ``anneal``'s schedule (over ``--anneal-steps`` too);
- ``repeat-only``: repeat-after-gap alone, the focused phase for the one task that an anneal left below the bar;
- ``anneal``: the mixture unchanged, after a 50-step warmup the learning rate decayed from ``--lr`` (with
  ``--init-pack``; else the recipe's) along a cosine to 2% of it over ``--anneal-steps`` steps, where the run ends
  (the constant-rate variants leave the weights noisy).

A staged variant ``a+b`` (``mqar-small+continue``) trains ``a``, then ``b`` from ``a``'s newest checkpoint;
``--score-stages`` scores ``a``'s end too (row ``a+b.0``).

The runs share the GPU (each a process of its own, its documents made by ``data.workers`` processes); their
step counts differ with how the GPU is shared, and the table says how many steps each made. Checkpoints every 250
steps; the bar is evaluated on each run's newest checkpoint (``pretrain_base.evaluate_bar``).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pretrain_base  # noqa: E402
from pretrain_base import RECIPE, TASKS, evaluate_bar  # noqa: E402

VARIANTS = ("answer", "answer-x8", "recall-only", "full")
EASY_NIAH_NEEDLES = [2, 5]  # niah-easy, niah-mix, niah-multi, multi-mix: 2-5 needles (the evaluation has 5)
ANNEALS = ("anneal", "multi-anneal")  # variants whose rate decays along a cosine over their steps, where they end
MULTI_QUERIES = {"niah-multi": [2, 4], "multi-mix": [1, 3], "multi-anneal": [1, 3]}  # needles asked per document
MQAR_VARIANTS = ("continue", "mqar-heavy", "mqar-only", "mqar-small", "mix-small", "mix-small-x3",
                 "text-recall", "text-heavy", "niah-easy", "niah-mix", "niah-multi", "multi-mix", "multi-anneal",
                 "repeat-only", "anneal")


def variant_recipe(base: dict, name: str, workers: int, init: Path | None = None, lr: float = 1e-3,
                   anneal_steps: int = 2400) -> dict:
    recipe = copy.deepcopy(base)
    if recipe["data"].get("tokenizer"):  # the recipe is written elsewhere: its relative paths must not move
        recipe["data"]["tokenizer"] = str((RECIPE.parent / recipe["data"]["tokenizer"]).resolve())
    if init is not None:  # go on from the given weights: fresh optimizer, constant lr, as long as time allows
        # absolute: the recipe is written elsewhere, and its loader reads a relative path from the recipe's folder
        recipe["model"] = {"path": str(Path(init).resolve()), "upgrade_layers": "none", "dtype": "float32"}
        recipe["data"].pop("tokenizer", None)
        recipe["optim"]["lr"] = lr
        recipe["schedule"] = {"type": "constant", "warmup_steps": 100}
        recipe["train"]["max_steps"] = 1_000_000
    sources = recipe["data"]["sources"]
    by_task = {s.get("task"): s for s in sources if s.get("type") == "synthetic"}
    recipe["data"]["workers"] = workers
    recipe["checkpoint"] = {"every": 250, "keep": 1}
    recipe["eval"]["every"] = 1000
    if name in MQAR_VARIANTS:
        if name == "mqar-heavy":
            by_task["mqar"].update(weight=6 * by_task["mqar"]["weight"], pairs=[2, 64])
            by_task["mqar-gap"].update(weight=3 * by_task["mqar-gap"]["weight"], pairs=[2, 32])
        elif name in ("mix-small", "mix-small-x3"):
            scale = 3 if name == "mix-small-x3" else 1
            by_task["mqar"].update(weight=2 * scale * by_task["mqar"]["weight"], pairs=[2, 16])
            by_task["mqar-gap"].update(weight=scale * by_task["mqar-gap"]["weight"], pairs=[2, 8])
        elif name == "mqar-only":
            by_task["mqar"]["pairs"], by_task["mqar-gap"]["pairs"] = [2, 64], [2, 32]
            recipe["data"]["sources"] = [by_task["mqar"], by_task["mqar-gap"]]
        elif name == "mqar-small":
            by_task["mqar"]["pairs"] = [2, 16]
            recipe["data"]["sources"] = [by_task["mqar"]]
        elif name in ("text-heavy", "niah-mix", "multi-mix", "multi-anneal"):
            for task in ("niah-fwpkm", "repeat"):
                by_task[task]["weight"] *= 3
        elif name == "text-recall":
            recipe["data"]["sources"] = [by_task["niah-fwpkm"], by_task["repeat"]]
        elif name == "repeat-only":
            recipe["data"]["sources"] = [by_task["repeat"]]
        elif name in ("niah-easy", "niah-multi"):
            recipe["data"]["sources"] = [by_task["niah-fwpkm"]]
        if name in ("niah-easy", "niah-mix", *MULTI_QUERIES):  # NIAH-FwPKM's easy form, and several questions
            by_task["niah-fwpkm"]["needles"] = list(EASY_NIAH_NEEDLES)
        if name in MULTI_QUERIES:
            by_task["niah-fwpkm"]["queries"] = list(MULTI_QUERIES[name])
        if name in ANNEALS:
            recipe["schedule"] = {"type": "cosine", "warmup_steps": 50, "min_lr_ratio": 0.02}
            recipe["train"]["max_steps"] = anneal_steps
        # a variant that dropped the text keeps it at a negligible weight: eval batches come from the first source
        if not any(s.get("type") == "stdlib" for s in recipe["data"]["sources"]):
            recipe["data"]["sources"].insert(0, {**next(s for s in sources if s.get("type") == "stdlib"),
                                                 "weight": 1e-6})
        return recipe
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
        raise SystemExit(f"pretrain_base_variants: unknown variant {name}; choose from "
                         f"{', '.join(VARIANTS + MQAR_VARIANTS)}")
    return recipe


def run_slot(name: str, base: dict, init: Path | None, args) -> None:
    """One variant's run; a staged one (``a+b``) trains ``a`` for ``--first-share`` of the time, then ``b`` from
    ``a``'s newest checkpoint, the last stage in ``out/NAME``."""
    from palimpsa.upgrade.train.layout import latest_checkpoint

    stages = name.split("+")
    started = time.monotonic()
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        run = args.out / (name if last else f"{name}.{index}")
        if run.exists():  # a race starts fresh: an earlier race's run in the same folder would be resumed or mixed in
            shutil.rmtree(run)
        recipe_path = args.out / f"{name}.{index}.yaml"
        recipe_path.write_text(yaml.safe_dump(variant_recipe(base, stage, args.workers, init, args.lr,
                                                              args.anneal_steps),
                                               sort_keys=False))
        command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(recipe_path),
                   f"output_dir={run}", *args.overrides]
        print(f"pretrain_base_variants: {name} ({stage}): {' '.join(command)}", flush=True)
        minutes = args.minutes * (1 if last else args.first_share * (index + 1))
        log_path = args.out / f"{name}.{index}.log"
        with open(log_path, "w") as log:
            status = pretrain_base.run_until(command, started + 60 * minutes, log)
        if status:  # it failed before its deadline: say why here, where a device call's output shows it
            tail = [line.strip() for line in log_path.read_text(errors="replace").replace("\r", "\n").splitlines()
                    if line.strip() and "%|" not in line][-4:]
            print(f"pretrain_base_variants: {name} ({stage}) failed (exit {status}): " + " / ".join(tail), flush=True)
        elif status is None and latest_checkpoint(run) is None:
            print(f"pretrain_base_variants: {name} ({stage}) reached its deadline before its first checkpoint "
                  f"(every 250 steps; see {log_path.name}): give it more --minutes or a larger --first-share",
                  flush=True)
        if not last:
            checkpoint = latest_checkpoint(run)
            if checkpoint is None:
                print(f"pretrain_base_variants: {name}: stage {stage} left no checkpoint", flush=True)
                return
            init = checkpoint / "model"


def keep_best(name: str, scored: dict[str, float], args) -> None:
    """The weights of the variant with the best mean recall at 1x over the bar's tasks, in bf16 shards (as the
    curriculum carries weights between stages: the next run starts a fresh optimizer anyway), with the model's
    config and tokenizer beside them: a folder that ``--init-pack`` reads (a base of the recipe's size) and that
    ``--init-model`` or any loader takes as a model directory (any size). A 13.9M base's is 7 files, 28 MB: a
    device call returns at most 8."""
    from palimpsa.upgrade.train.layout import latest_checkpoint
    from safetensors.torch import load_file

    checkpoint = latest_checkpoint(args.out / name)
    pretrain_base.write_shards(load_file(checkpoint / "state" / "model.safetensors"), args.keep_best, bf16=True)
    for kept in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(checkpoint / "model" / kept, args.keep_best / kept)
    (args.keep_best / "best.json").write_text(json.dumps({"variant": name, "mean_recall_1x": scored}, indent=2)
                                              + "\n")
    print(f"pretrain_base_variants: kept {name}'s weights in {args.keep_best} (mean recall at 1x "
          f"{scored[name]:.2f})", flush=True)


def _at_least_100(text: str) -> int:
    if not text.isdigit() or int(text) < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of steps of at least 100 (past the warmup)")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma list (default: the first four); a+b trains a, then b from a's newest checkpoint")
    parser.add_argument("--minutes", type=float, default=7.0, help="training time of every variant (default 7)")
    parser.add_argument("--workers", type=int, default=2, help="data.workers of each run (default 2)")
    parser.add_argument("--samples", type=int, default=40, help="prompts per task and length for the bar")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "base-variants")
    parser.add_argument("--lengths", default="512,1024", help="bar lengths, comma list (default 512,1024)")
    parser.add_argument("--init-pack", type=Path, default=None, metavar="DIR",
                        help="start every variant from the weights of a packed run (pretrain_base.py --pack)")
    parser.add_argument("--init-model", type=Path, default=None, metavar="DIR",
                        help="start every variant from a model directory (a base that pretrain_base.py or "
                             "pretrain_base_curriculum.py wrote, of any size); instead of --init-pack")
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="constant learning rate with --init-pack or --init-model")
    parser.add_argument("--anneal-steps", type=_at_least_100, default=2400, metavar="N",
                        help="length of the cosine decay of anneal and multi-anneal, where they stop (default 2400)")
    parser.add_argument("--keep-best", type=Path, default=None, metavar="DIR",
                        help="write the variant with the best mean recall at 1x to DIR (bf16 weights, config and "
                             "tokenizer: --init-pack or --init-model reads it)")
    parser.add_argument("--first-share", type=float, default=0.4,
                        help="share of --minutes for each stage but the last of a staged variant (a+b)")
    parser.add_argument("--score-stages", action="store_true",
                        help="also score every earlier stage of a staged variant (a row NAME.0 for a's end), and "
                        "let --keep-best choose among them: tells whether the later stage helped")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides for every variant")
    args = parser.parse_args(argv)
    pretrain_base.LENGTHS[:] = [int(n) for n in args.lengths.split(",")]
    names = [n for n in args.variants.split(",") if n]
    base = yaml.safe_load(RECIPE.read_text())
    if args.init_pack is not None and args.init_model is not None:
        parser.error("give --init-pack or --init-model, not both")
    if args.init_model is not None and not (args.init_model / "config.json").is_file():
        parser.error(f"--init-model {args.init_model} holds no config.json; give a model directory")
    args.out.mkdir(parents=True, exist_ok=True)
    init = None
    if args.init_model is not None:
        init = args.init_model.resolve()
        print(f"pretrain_base_variants: every variant starts from {args.init_model} (lr {args.lr:g})", flush=True)
    if args.init_pack is not None:
        init = pretrain_base.model_from_pack(args.init_pack, args.out / "init")
        print(f"pretrain_base_variants: every variant starts from {args.init_pack} (lr {args.lr:g})", flush=True)
    threads = [threading.Thread(target=run_slot, args=(name, base, init, args)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    import torch
    from palimpsa.upgrade.train.layout import latest_checkpoint

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {}
    rows = []  # (label, its logs): each variant's last stage, and with --score-stages its earlier ones first
    for name in names:
        if args.score_stages:
            rows += [(f"{name}.{index}", f"{name}.{index}.log") for index in range(name.count("+"))]
        rows.append((name, f"{name}.*.log"))
    for name, logs in rows:
        run = args.out / name  # a stage's run folder is named as its row
        checkpoint = latest_checkpoint(run)
        if checkpoint is None:
            results[name] = {"error": f"no checkpoint (see {logs})"}
            continue
        step = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
        metrics = run / "metrics.jsonl"  # written every train.log_every steps: absent in a run shorter than that
        rows = [json.loads(line) for line in (metrics.read_text().splitlines() if metrics.is_file() else [])
                if line.strip()]
        rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        report = evaluate_bar(checkpoint / "model", args.samples, device)
        results[name] = {"step": step, "tokens_per_s": sum(rates[-10:]) / max(1, len(rates[-10:])),
                         "eval_nll": next((r["eval_nll"] for r in reversed(rows) if "eval_nll" in r), None),
                         "bar": report, "mqar_by_pairs": report["mqar_by_pairs"]}
        print(f"pretrain_base_variants: {name} at step {step}: " + ", ".join(
            f"{t} {report['accuracy'][t][0]:.2f}" for t in TASKS) + ", MQAR by pairs " + ", ".join(
            f"{k}: {v:.2f}" for k, v in report["mqar_by_pairs"].items()), flush=True)
    (args.out / "variants.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| variant | steps | tokens/s | " + " | ".join(f"{t} 1x / 2x" for t in TASKS) + " | MQAR 2 / 8 pairs |",
             "|---|---|---|" + "---|" * (len(TASKS) + 1)]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | {result['error']} |")
            continue
        accuracy = result["bar"]["accuracy"]
        cells = [" / ".join("-" if v is None else f"{v:.2f}" for v in accuracy[t][:2]) for t in TASKS]
        pairs = result["mqar_by_pairs"]
        lines.append(f"| {name} | {result['step']} | {result['tokens_per_s'] / 1e3:.0f}K | " + " | ".join(cells)
                     + f" | {pairs['2']:.2f} / {pairs['8']:.2f} |")
    table = "\n".join(lines)
    (args.out / "variants.md").write_text(table + "\n")
    scored = {name: sum(r["bar"]["accuracy"][t][0] for t in TASKS) / len(TASKS) for name, r in results.items()
              if "error" not in r}
    if args.keep_best and scored:
        # on a tie the later row: a staged variant's last stage before its first (rows come first stage first)
        keep_best(max(reversed(list(scored)), key=scored.get), scored, args)
    print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
