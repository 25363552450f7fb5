"""Does the Palimpsa upgrade lift long-context recall? A measured answer at small scale, on one GPU.

    python scripts/longctx_experiment.py --output docs/results

The base is the embedded default model (a byte-level Mamba2 pretrained on 512-token rows, see
upgrade/assets/tiny-mamba2/README.md). Three arms get the same fine-tuning budget (same steps, batches and data:
standard-library text mixed with passkey, NIAH and MQAR-with-gap documents, rows of ``--train-length`` tokens):

- ``palimpsa-beta``: ``--layers`` layers upgraded, only the beta parameters trained;
- ``palimpsa-beta-lora``: the same upgrade, beta plus LoRA adapters on the upgraded layers' projections;
- ``mamba2-full``: the plain Mamba2, every parameter trained.

Each arm runs a 3-point learning-rate search; the point kept is the one with the lowest held-out NLL of the
fine-tuning mixture (chosen before any test metric is looked at). The kept runs and the untouched base are then
evaluated on identical seeded inputs: passkey, NIAH (single and multi-key) and MQAR with a haystack gap at 1x to
16x the pretraining length, NLL against position on Python's ``pydoc_data.topics`` (never trained on), and NLL on
windows of the pretraining length over that text. Writes ``longctx.json``, ``longctx.md`` and plots to
``--output``.

The bar (stated before running): an upgraded arm beats the equal-budget Mamba2 fine-tune on recall at >= 4x the
pretraining length, with at most 1% NLL regression at the pretraining length (against the base).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "upgrade" / "assets" / "tiny-mamba2"
ARMS = {
    # name: (recipe overrides, learning rates searched); beta+lora gives beta a 10x learning rate
    "palimpsa-beta": ({"trainable": {"mode": "beta"}}, [3e-3, 1e-2, 3e-2]),
    "palimpsa-beta-lora": ({"trainable": {"mode": "beta+lora"}, "lora": {"r": 8, "alpha": 16,
                                                                          "target_modules": ["in_proj", "out_proj"]}},
                           [3e-4, 1e-3, 3e-3]),
    "mamba2-full": ({"trainable": {"mode": "all"}}, [1e-4, 3e-4, 1e-3]),
}
RECALL_TASKS = ("passkey", "niah_single", "niah_multikey", "mqar_gap")


def recipe_for(arm: str, lr: float, args, output_dir: Path) -> dict:
    overrides, _ = ARMS[arm]
    recipe = {
        "output_dir": str(output_dir),
        # a recipe's relative paths are read from its own folder: a local base is written absolute
        "model": {"path": str(Path(args.base).resolve()) if Path(args.base).exists() else args.base,
                  "upgrade_layers": "none" if arm == "mamba2-full" else args.layers, "dtype": "float32"},
        "data": {"sources": [{"type": "stdlib", "weight": 0.1},
                             {"type": "synthetic", "task": "passkey", "documents": 20000, "weight": 1},
                             {"type": "synthetic", "task": "niah", "documents": 20000, "weight": 1},
                             {"type": "synthetic", "task": "mqar-gap", "documents": 20000, "weight": 1}],
                 "seq_len": args.train_length, "batch_size": args.batch_size, "eval_documents": 8, "seed": 7},
        "optim": {"lr": lr, "weight_decay": 0.0, "grad_clip": 1.0},
        "schedule": {"type": "cosine", "warmup_steps": max(1, args.steps // 10), "min_lr_ratio": 0.1},
        "train": {"max_steps": args.steps, "mixed_precision": "bf16" if torch.cuda.is_available() else "no",
                  "log_every": max(1, args.steps // 10), "seed": 0},
        "eval": {"every": 0, "batches": 4, "passkey_samples": 0},
        "checkpoint": {"every": 0, "keep": 1},
        "logging": {"tensorboard": False},
        **overrides,
    }
    if arm == "palimpsa-beta-lora":
        recipe["optim"]["beta_lr"] = min(1.0, 10 * lr)
    return recipe


def fine_tune(arm: str, lr: float, args, work: Path) -> dict:
    from palimpsa.upgrade.cli.finetune_model import run as finetune

    output_dir = work / f"{arm}-lr{lr:g}"
    output_dir.mkdir(parents=True, exist_ok=True)
    recipe_path = output_dir.parent / f"{output_dir.name}.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe_for(arm, lr, args, output_dir), sort_keys=False))
    started = time.perf_counter()
    finetune([str(recipe_path)])
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    final = [row for row in rows if "eval_nll" in row][-1]
    losses = [row for row in rows if "loss" in row]
    return {"arm": arm, "lr": lr, "eval_nll": final["eval_nll"], "final_loss": losses[-1]["loss"],
            "tokens_per_s": losses[-1]["tokens_per_s"], "seconds": round(time.perf_counter() - started, 1),
            "beta_gain_mean": losses[-1].get("gain_geomean"), "model": str(output_dir / "final")}


@torch.no_grad()
def nll_windows(model, ids: torch.Tensor, window: int, count: int, batch: int) -> float:
    """Mean next-token NLL over ``count`` consecutive non-overlapping windows of ``window`` tokens, each from a
    fresh state: what the model does at the pretraining length."""
    import torch.nn.functional as F

    device = next(model.parameters()).device
    count = min(count, (ids.numel() - 1) // window)
    rows = ids[: count * window].view(count, window)
    total, tokens = 0.0, 0
    for first in range(0, count, batch):
        chunk = rows[first : first + batch].to(device)
        logits = model(chunk).logits[:, :-1].float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                 reduction="sum").item()
        tokens += chunk[:, 1:].numel()
    return total / tokens


def evaluate(name: str, source: str, args, text_ids: torch.Tensor) -> dict:
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.evaluate.evaluation import EvalSettings, evaluate_model

    model, tokenizer = load_model_and_tokenizer(source)
    model = model.to(args.device).eval()
    lengths = [args.pretrain_length * m for m in args.multiples]
    settings = EvalSettings(tasks=["nll-position", "passkey", "niah", "mqar-gap"], lengths=lengths,
                            per_cell=args.per_cell, seed=0, segment_length=args.train_length,
                            nll_length=max(lengths), mqar_gap_pairs=args.mqar_pairs,
                            train_length=args.pretrain_length, batch_size=args.eval_batch, device=args.device)
    started = time.perf_counter()
    result = evaluate_model(name, model, tokenizer, settings, text_ids[: max(lengths) + 1], progress=False)
    result["nll_at_pretrain_length"] = nll_windows(model, text_ids, args.pretrain_length, args.nll_windows,
                                                   args.eval_batch * 4)
    result["recall_by_length"] = {
        "passkey": result["passkey"]["by_length"], "niah_single": result["niah"]["single"]["by_length"],
        "niah_multikey": result["niah"]["multikey"]["by_length"], "mqar_gap": result["mqar_gap"]["by_length"]}
    depths = len(settings.depths)
    result["recall_samples"] = {"passkey": args.per_cell * depths, "niah_single": args.per_cell * depths,
                                "niah_multikey": args.per_cell * depths,
                                "mqar_gap": 4 * args.per_cell * args.mqar_pairs}  # per length (mqar: queries)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["seconds"] = round(time.perf_counter() - started, 1)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def verdict(results: dict[str, dict], lengths: list[int], pretrain_length: int) -> dict:
    """Mean recall over the four tasks at each length >= 4x, per model; the bar for each upgraded arm."""
    far = [i for i, length in enumerate(lengths) if length >= 4 * pretrain_length]

    def far_recall(result: dict) -> float:
        values = [result["recall_by_length"][task][i] for task in RECALL_TASKS for i in far]
        return sum(values) / len(values)

    def far_recall_se(result: dict) -> float:
        """Standard error of ``far_recall`` from the binomial variance of each (task, length) cell's accuracy
        (its samples, or for MQAR its queries, taken as independent)."""
        variance = sum(p * (1 - p) / result["recall_samples"][task]
                       for task in RECALL_TASKS for p in (result["recall_by_length"][task][i] for i in far))
        return math.sqrt(variance) / (len(RECALL_TASKS) * len(far))

    base_nll = results["base"]["nll_at_pretrain_length"]
    summary = {"far_lengths": [lengths[i] for i in far],
               "far_recall": {name: far_recall(r) for name, r in results.items()},
               "nll_regression_vs_base": {name: r["nll_at_pretrain_length"] / base_nll - 1
                                          for name, r in results.items()}}
    summary["far_recall_se"] = {name: far_recall_se(r) for name, r in results.items()}
    baseline = summary["far_recall"].get("mamba2-full")
    summary["bar"] = {}
    for arm in (a for a in results if a.startswith("palimpsa")):
        beats = baseline is not None and summary["far_recall"][arm] > baseline
        nll_ok = summary["nll_regression_vs_base"][arm] <= 0.01
        summary["bar"][arm] = {"beats_mamba2_recall_at_4x_plus": beats, "nll_within_1pct": nll_ok,
                               "met": beats and nll_ok}
        if baseline is not None:
            spread = math.hypot(summary["far_recall_se"][arm], summary["far_recall_se"]["mamba2-full"])
            z = (summary["far_recall"][arm] - baseline) / spread if spread else 0.0
            summary["bar"][arm]["z_vs_mamba2"] = z  # difference in standard errors; |z| < 2: within noise
    return summary


def markdown(report: dict) -> str:
    lengths, results = report["lengths"], report["results"]
    names = list(results)
    lines = ["# Does the Palimpsa upgrade lift long-context recall? (tiny model)", "",
             f"Measured {report['date']} on {report['device_name']} by `scripts/longctx_experiment.py` "
             f"({report['total_seconds']:.0f} s). Base: the embedded default model (byte-level Mamba2, "
             f"{report['base_parameters'] / 1e6:.2f}M parameters, pretrained on {report['pretrain_length']}-token "
             f"rows). Fine-tuning: {report['steps']} steps of {report['batch_size']} x {report['train_length']} "
             f"tokens for every run; upgraded layers {report['upgraded_layers']}.", "",
             "## The bar", "",
             f"An upgraded arm must beat the equal-budget Mamba2 fine-tune on recall at >= 4x the pretraining length "
             f"(mean of passkey, NIAH single, NIAH multi-key and MQAR-gap accuracy at "
             f"{', '.join(str(x) for x in report['verdict']['far_lengths'])} tokens) with <= 1% NLL regression at "
             f"the pretraining length (against the base).", "",
             "| model | recall at >= 4x | NLL @ " + str(report["pretrain_length"]) + " (nats/byte) | vs base | bar |"
             " difference from mamba2-full in standard errors |",
             "|---|---|---|---|---|---|"]
    se = report["verdict"]["far_recall_se"]
    for name in names:
        bar = report["verdict"]["bar"].get(name)
        z = None if bar is None else bar.get("z_vs_mamba2")
        recall = f"{report['verdict']['far_recall'][name]:.3f} ± {se[name]:.3f}"
        lines.append(f"| {name} | {recall} | "
                     f"{results[name]['nll_at_pretrain_length']:.4f} | "
                     f"{100 * report['verdict']['nll_regression_vs_base'][name]:+.2f}% | "
                     f"{'-' if bar is None else ('met' if bar['met'] else 'not met')} | "
                     f"{'-' if z is None else f'{z:+.2f}'} |")
    lines += ["", "## Recall by length", ""]
    for task in RECALL_TASKS:
        lines += [f"**{task}**", "", "| model | " + " | ".join(str(x) for x in lengths) + " |",
                  "|---|" + "---|" * len(lengths)]
        for name in names:
            lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in results[name]["recall_by_length"][task])
                         + " |")
        lines.append("")
    lines += ["## NLL against position (pydoc_data.topics, state carried)", "",
              "| model | NLL within " + str(report["pretrain_length"]) + " | NLL beyond | all positions |",
              "|---|---|---|---|"]
    for name in names:
        nll = results[name]["nll_position"]
        lines.append(f"| {name} | {nll['within_train_length']:.4f} | {nll['beyond_train_length']:.4f} | "
                     f"{nll['overall']:.4f} |")
    lines += ["", "## Learning-rate search (kept: lowest held-out NLL of the fine-tuning mixture)", "",
              "| arm | lr | held-out NLL | final train loss | mean beta gain | tokens/s | seconds | kept |",
              "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        kept = report["selected"][run["arm"]]["lr"] == run["lr"]
        gain = "-" if run["beta_gain_mean"] is None else f"{run['beta_gain_mean']:.3g}"
        lines.append(f"| {run['arm']} | {run['lr']:g} | {run['eval_nll']:.4f} | {run['final_loss']:.4f} | {gain} | "
                     f"{run['tokens_per_s']:,.0f} | {run['seconds']:.0f} | {'yes' if kept else ''} |")
    lines += ["", "Plots: `longctx_recall.png` (recall against length, one panel per task), "
              "`longctx_nll_position.png`, `longctx_lr_search.png`.", ""]
    return "\n".join(lines)


def plots(report: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from palimpsa.upgrade.evaluate.plots import plot_nll

    lengths, results = report["lengths"], report["results"]
    figure, axes = plt.subplots(1, len(RECALL_TASKS), figsize=(4.2 * len(RECALL_TASKS), 3.8), sharey=True)
    for axis, task in zip(axes, RECALL_TASKS):
        for name, result in results.items():
            axis.plot(lengths, result["recall_by_length"][task], marker="o", label=name)
        axis.axvline(report["pretrain_length"], color="grey", linestyle=":", linewidth=1)
        axis.axvline(report["train_length"], color="grey", linestyle="--", linewidth=1)
        axis.set_xscale("log", base=2)
        axis.set_title(task)
        axis.set_xlabel("context length (tokens)")
        axis.set_ylim(-0.03, 1.03)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[-1].legend(fontsize=8)
    figure.suptitle("Recall against length (dotted: pretraining length, dashed: fine-tuning length)")
    figure.tight_layout()
    figure.savefig(output / "longctx_recall.png", dpi=120)
    plt.close(figure)
    plot_nll(list(results.values()), report["pretrain_length"], output / "longctx_nll_position.png")
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for arm in ARMS:
        runs = [r for r in report["runs"] if r["arm"] == arm]
        if runs:
            axis.plot([r["lr"] for r in runs], [r["eval_nll"] for r in runs], marker="o", label=arm)
    axis.set_xscale("log")
    axis.set_xlabel("learning rate")
    axis.set_ylabel("held-out NLL of the fine-tuning mixture")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(output / "longctx_lr_search.png", dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=str(ROOT / "docs" / "results"), help="where longctx.* are written")
    parser.add_argument("--work", default="runs/longctx", help="fine-tuning runs (kept for inspection)")
    parser.add_argument("--base", default=str(BASE), help="the pretrained Mamba2")
    parser.add_argument("--layers", default="2", help="layers to upgrade (a count or a list, as upgrade-model)")
    parser.add_argument("--pretrain-length", type=int, default=512)
    parser.add_argument("--train-length", type=int, default=2048, help="fine-tuning row length")
    parser.add_argument("--multiples", default="1,2,4,8,16", help="evaluation lengths, in pretraining lengths")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma list of arms")
    parser.add_argument("--lrs", type=int, default=3, help="how many of each arm's learning rates to search")
    parser.add_argument("--per-cell", type=int, default=4, help="passkey/NIAH samples per length x depth")
    parser.add_argument("--mqar-pairs", type=int, default=8)
    parser.add_argument("--nll-windows", type=int, default=256)
    parser.add_argument("--eval-batch", type=int, default=16)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--render", metavar="JSON", help="only rewrite longctx.md and the plots from a longctx.json")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        for result in report["results"].values():  # reports written before the sample counts were recorded
            depths = len(result["passkey"]["depths"])
            result.setdefault("recall_samples", {
                "passkey": report["per_cell"] * depths, "niah_single": report["per_cell"] * depths,
                "niah_multikey": report["per_cell"] * depths,
                "mqar_gap": 4 * report["per_cell"] * result["mqar_gap"]["pairs"]})
        report["verdict"] = verdict(report["results"], report["lengths"], report["pretrain_length"])
        output = Path(args.output)
        output.mkdir(parents=True, exist_ok=True)
        (output / "longctx.json").write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
        (output / "longctx.md").write_text(markdown(report))
        plots(report, output)
        return 0
    args.multiples = [int(m) for m in args.multiples.split(",")]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"longctx_experiment: unknown arm {unknown[0]!r}; choose from {', '.join(ARMS)}")
    output, work = Path(args.output), Path(args.work)
    output.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = []
    plan = [(arm, lr) for arm in arms for lr in ARMS[arm][1][: args.lrs]]
    print(f"longctx_experiment: {len(plan)} fine-tuning runs of {args.steps} steps x {args.batch_size} x "
          f"{args.train_length} tokens, then {len(arms) + 1} models evaluated at "
          f"{[args.pretrain_length * m for m in args.multiples]} tokens", flush=True)
    for index, (arm, lr) in enumerate(plan, 1):
        print(f"[{index}/{len(plan)}] {arm} lr {lr:g}", flush=True)
        runs.append(fine_tune(arm, lr, args, work))
        print(f"  held-out NLL {runs[-1]['eval_nll']:.4f} in {runs[-1]['seconds']:.0f} s", flush=True)
    selected = {arm: min((r for r in runs if r["arm"] == arm), key=lambda r: r["eval_nll"]) for arm in arms}

    from palimpsa.upgrade.evaluate.tasks import default_long_text
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.base)
    text_ids = tokenizer(default_long_text(), add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    needed = args.pretrain_length * max(args.multiples) + 1
    if text_ids.numel() < needed:
        raise SystemExit(f"longctx_experiment: pydoc_data.topics has {text_ids.numel()} tokens, fewer than {needed}")
    results = {"base": evaluate("base", args.base, args, text_ids)}
    print(f"evaluated base in {results['base']['seconds']:.0f} s", flush=True)
    for arm, run in selected.items():
        results[arm] = evaluate(arm, run["model"], args, text_ids)
        print(f"evaluated {arm} (lr {run['lr']:g}) in {results[arm]['seconds']:.0f} s", flush=True)

    lengths = [args.pretrain_length * m for m in args.multiples]
    report = {
        "date": time.strftime("%Y-%m-%d"), "device_name": torch.cuda.get_device_name() if args.device == "cuda"
        else platform.processor() or "CPU", "python": platform.python_version(), "torch": torch.__version__,
        "base": args.base, "base_parameters": results["base"]["parameters"],
        "upgraded_layers": args.layers, "pretrain_length": args.pretrain_length, "train_length": args.train_length,
        "steps": args.steps, "batch_size": args.batch_size, "lengths": lengths, "per_cell": args.per_cell,
        "runs": runs, "selected": selected, "results": results,
        "verdict": verdict(results, lengths, args.pretrain_length),
        "command": " ".join(["python scripts/longctx_experiment.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    (output / "longctx.json").write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
    (output / "longctx.md").write_text(markdown(report))
    plots(report, output)
    print(markdown(report))
    return 0


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
