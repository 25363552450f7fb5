"""Does the importance leave its prior when fine-tuning can reward it? The recall-heavy run of the gain, one GPU.

    python scripts/metaplasticity_run.py --output docs/results/metaplasticity

Fine-tunes the embedded tiny Mamba2 with ``recipes/tiny-recall-2k.yaml`` (every layer upgraded, recall documents
at 4x the pretraining length with the loss on their answers, the recipe's default gain settings) in arms that
differ only in what trains: ``beta`` (the gate and the gains), ``beta+lora`` (the recipe as shipped) and
``upgraded`` (every weight of the upgraded layers). For each arm it records the gain and importance trajectories
per layer (the run's ``metrics.jsonl``), ``inspect-importance`` on the final model (a 2048-token passkey prompt),
and passkey accuracy at 1x to 8x the pretraining length with the model's own beta and at beta scale 0 (the
ablation that separates metaplasticity from the other weights), against the base. Writes ``metaplasticity.json``,
``metaplasticity.md`` and plots to ``--output``. An arm whose final model exists is not trained again, so a
killed run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny-recall-2k.yaml"
BASE = ROOT / "upgrade" / "assets" / "tiny-mamba2"
ARMS = {  # what trains; everything else is the recipe's
    "beta": {"trainable": {"mode": "beta"}, "optim": {"lr": 1e-2}},
    "beta+lora": {},
    "upgraded": {"trainable": {"mode": "upgraded"}, "optim": {"lr": 3e-4}},
}
LIMIT = 0.1  # mean I - I_prior that counts as having left the Mamba2 limit (the criterion)


def merged(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def train(arm: str, args, work: Path) -> Path:
    from palimpsa.upgrade.cli.finetune_model import run as finetune

    run_dir = work / arm.replace("+", "-")
    if (run_dir / "final" / "config.json").is_file():
        print(f"[{arm}] already trained: {run_dir / 'final'}")
        return run_dir
    recipe = merged(yaml.safe_load(RECIPE.read_text()), ARMS[arm])
    recipe = merged(recipe, {"output_dir": str(run_dir), "model": {"path": str(BASE), "beta_init": args.beta_init},
                             "train": {"max_steps": args.steps,
                                       "mixed_precision": "bf16" if torch.cuda.is_available() else "no"},
                             "data": {"seq_len": args.length, "batch_size": args.batch_size},
                             "schedule": {"warmup_steps": max(1, args.steps // 10)},
                             "eval": {"every": max(1, args.steps // 6), "passkey_length": args.length},
                             "logging": {"tensorboard": importlib.util.find_spec("tensorboard") is not None}})
    path = work / f"{run_dir.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    resume = (run_dir / "recipe.yaml").is_file()
    started = time.perf_counter()
    finetune([str(path)] + (["--resume"] if resume else []))
    print(f"[{arm}] trained in {time.perf_counter() - started:.0f} s")
    return run_dir


def passkey_by_length(model, tokenizer, lengths: list[int], samples: int, device: str) -> list[float]:
    from palimpsa.upgrade.evaluate.evaluation import EvalSettings, evaluate_model

    settings = EvalSettings(tasks=["passkey"], lengths=lengths, per_cell=samples, batch_size=8, device=device)
    return evaluate_model("m", model, tokenizer, settings, None, progress=False)["passkey"]["by_length"]


def evaluate(source: Path, args, probe) -> dict:
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.evaluate.importance import inspect_importance

    model, tokenizer = load_model_and_tokenizer(source)
    model = model.to(args.device).eval()
    lengths = [512 * m for m in args.multiples]
    result = {"passkey_lengths": lengths,
              "passkey": passkey_by_length(model, tokenizer, lengths, args.samples, args.device)}
    if model.palimpsa_mixers():
        result["importance"] = inspect_importance(model, probe)
        with model.beta_scaled(0.0):
            result["passkey_beta_off"] = passkey_by_length(model, tokenizer, lengths, args.samples, args.device)
    del model
    return result


def trajectories(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_rows = [r for r in rows if "loss" in r]
    eval_rows = [r for r in rows if "eval_nll" in r]
    layers = sorted({int(k.split("/L")[1]) for r in train_rows for k in r if k.startswith("gain/L")})
    return {
        "layers": layers,
        "steps": [r["step"] for r in train_rows], "loss": [r["loss"] for r in train_rows],
        "gain": {str(i): [r[f"gain/L{i}"] for r in train_rows] for i in layers},
        "eval_steps": [r["step"] for r in eval_rows], "eval_nll": [r["eval_nll"] for r in eval_rows],
        "passkey_accuracy": [r.get("passkey_accuracy") for r in eval_rows],
        "mean_excess": {str(i): [r.get(f"importance/L{i}/mean_excess") for r in eval_rows] for i in layers},
        "share_above_2": {str(i): [r.get(f"importance/L{i}/share_above_2x_prior") for r in eval_rows]
                          for i in layers},
    }


def plot(report: dict, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(report["arms"])
    figure, axes = plt.subplots(3, len(arms), figsize=(4.6 * len(arms), 9.5), squeeze=False)
    for column, arm in enumerate(arms):
        t = report["arms"][arm]["trajectory"]
        for layer in t["layers"]:
            axes[0][column].semilogy(t["steps"], t["gain"][str(layer)], label=f"layer {layer}")
            axes[1][column].semilogy(t["eval_steps"], [max(v or 0, 1e-6) for v in t["mean_excess"][str(layer)]],
                                     "o-", label=f"layer {layer}")
            axes[2][column].plot(t["eval_steps"], t["share_above_2"][str(layer)], "o-", label=f"layer {layer}")
        axes[1][column].axhline(LIMIT, color="grey", linestyle="--", label=f"mean I - 1 = {LIMIT}")
        axes[0][column].set_title(f"{arm}: gain per layer (geometric mean over heads)", fontsize=9)
        axes[1][column].set_title("mean I - I_prior at the question (passkey probe)", fontsize=9)
        axes[2][column].set_title("share of cells with I > 2 I_prior", fontsize=9)
        for row in range(3):
            axes[row][column].set_xlabel("step")
            axes[row][column].grid(True, alpha=0.3)
            axes[row][column].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(output / "trajectories.png", dpi=110)
    plt.close(figure)


def markdown(report: dict) -> str:
    lines = ["# Does the importance leave its prior? A recall-heavy fine-tune of the embedded model", "",
             f"Measured {report['date']} on {report['device_name']} by `scripts/metaplasticity_run.py` "
             f"({report['total_seconds']:.0f} s): `recipes/tiny-recall-2k.yaml` ({report['steps']} steps of "
             f"{report['batch_size']} x {report['length']} tokens, every layer upgraded, gain init "
             f"{report['beta_init']:g}, "
             "optim.gain_lr 0.1), arms differing only in what trains.", "",
             "| arm | final gain per layer (geometric mean) | max over layers of mean I - I_prior | "
             "share I > 2 I_prior (max layer) | needle half-life added (tokens, max layer) | left the limit |",
             "|---|---|---|---|---|---|"]
    for arm, result in report["arms"].items():
        layers = result["final"]["importance"]["layers"]
        gains = ", ".join(f"{layer['summary']['gain_geomean']:.3g}" for layer in layers)
        excess = max(layer["summary"]["mean_excess"] for layer in layers)
        share = max(layer["summary"]["share_above_2x_prior"] for layer in layers)
        half_life = max(layer["summary"]["needle_half_life_added"] for layer in layers)
        lines.append(f"| {arm} | {gains} | {excess:.3g} | {share:.1%} | {half_life:.3g} | "
                     f"{'yes' if excess >= LIMIT else 'no'} |")
    lengths = report["base"]["passkey_lengths"]
    lines += ["", "Passkey accuracy by length, with the model's own beta and with beta scaled to 0 (the Mamba2 "
              "layers it holds, fine-tuned weights kept):", "",
              "| model | " + " | ".join(str(n) for n in lengths) + " |", "|---|" + "---|" * len(lengths),
              "| base | " + " | ".join(f"{v:.2f}" for v in report["base"]["passkey"]) + " |"]
    for arm, result in report["arms"].items():
        final = result["final"]
        lines.append(f"| {arm} | " + " | ".join(f"{v:.2f}" for v in final["passkey"]) + " |")
        lines.append(f"| {arm}, beta scale 0 | " + " | ".join(f"{v:.2f}" for v in final["passkey_beta_off"]) + " |")
    lines += ["", f"Verdict: {report['verdict']}", "",
              "Plots: `trajectories.png` (gain, mean excess importance and share of cells above 2 I_prior per layer "
              "against the step, per arm), `importance_<arm>.png` (inspect-importance heatmaps of the final "
              "models). Per-arm `metrics.jsonl` and the JSON report hold every number.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from palimpsa.upgrade.evaluate.importance import plot_importance, task_probe
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "metaplasticity")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "metaplasticity",
                        help="run directories (checkpoints, final models)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8, help="passkey samples per length and depth")
    parser.add_argument("--beta-init", type=float, default=1e-3, help="initial gain of the upgrade (every arm)")
    parser.add_argument("--multiples", default="1,2,4,8", help="passkey lengths as multiples of 512 tokens")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    args.multiples = [int(m) for m in args.multiples.split(",")]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    started = time.perf_counter()
    args.output.mkdir(parents=True, exist_ok=True)
    print(f"metaplasticity_run: arms {arms}, {args.steps} steps of {args.batch_size} x {args.length} tokens, "
          f"device {args.device}, work {args.work}, output {args.output}", flush=True)
    probe = task_probe(AutoTokenizer.from_pretrained(BASE), "passkey", args.length, depth=0.5, seed=1234)
    report = {"date": time.strftime("%Y-%m-%d"), "steps": args.steps, "length": args.length,
              "batch_size": args.batch_size, "beta_init": args.beta_init, "device_name": torch.cuda.get_device_name()
              if torch.cuda.is_available() else platform.processor() or "cpu", "arms": {}}
    report["base"] = evaluate(BASE, args, probe)
    for arm in arms:
        run_dir = train(arm, args, args.work)
        final = evaluate(run_dir / "final", args, probe)
        plot_importance(final["importance"], args.output / f"importance_{arm.replace('+', '-')}.png")
        (args.output / f"metrics_{arm.replace('+', '-')}.jsonl").write_text((run_dir / "metrics.jsonl").read_text())
        report["arms"][arm] = {"trajectory": trajectories(run_dir), "final": final}
        print(f"[{arm}] evaluated", flush=True)
    left = [arm for arm, r in report["arms"].items()
            if max(layer["summary"]["mean_excess"] for layer in r["final"]["importance"]["layers"]) >= LIMIT]
    report["verdict"] = (f"the importance left the Mamba2 limit (mean I - I_prior >= {LIMIT} in at least one layer) "
                         f"in {', '.join(left)}" if left else
                         f"the importance stayed within {LIMIT} of its prior in every arm")
    report["total_seconds"] = time.perf_counter() - started
    (args.output / "metaplasticity.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(report, args.output)
    (args.output / "metaplasticity.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
