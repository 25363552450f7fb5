"""Pretrain the long-context experiment's base (recipes/pretrain-base.yaml) in time-boxed pieces, check its recall
bar, and write it as a bf16 mamba_ssm-format checkpoint with its card and training log.

    python scripts/pretrain_base.py --minutes 9      # call again until it reports the base written

1. Trains with ``finetune-model`` (resuming the run in ``--run-dir`` when it holds a checkpoint) until
   ``train.max_steps`` or ``--minutes``, whichever comes first; on the time limit the run is interrupted (it
   checkpoints every 500 steps, so at most that much is redone) and the script says how far it got.
2. Once the run is complete: evaluates the recall bar on held-out haystacks, at 512 tokens (1x) and beyond (2x, 4x,
   8x): passkey, NIAH in the FwPKM form and repeat-after-gap (greedy, exact), MQAR (32 pairs) and MQAR with a gap
   (8 pairs) (argmax at every query). The bar: at least 0.90 on each at 1x.
3. Writes ``--output``: ``config.json`` (mamba_ssm's format), ``model.safetensors`` in bf16 (shards of at most
   15 MB), the tokenizer, ``README.md`` (the card, with the bar table), ``export_report.json`` (sha256 of every
   file) and ``training/`` (metrics, recipe, summary).

Extra ``KEY=VALUE`` arguments override the recipe (the same ones on every call of a run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "pretrain-base.yaml"
LENGTHS = [512, 1024, 2048, 4096]
BAR = 0.90
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]  # needle depths of the bar's passkey and NIAH prompts
TASKS = ("passkey", "niah_fwpkm", "repeat", "mqar_32", "mqar_gap_8")
SHARD_BYTES = 14 * 10**6  # packed shards: at most 15 MB a file in the repository, 16 MiB back from a device call


def train(args) -> bool:
    """Advance the run by at most ``args.minutes``; True once it has reached ``train.max_steps``."""
    from palimpsa.upgrade.train.layout import latest_checkpoint

    run_dir = Path(args.run_dir)
    if (run_dir / "final" / "config.json").is_file():
        return True
    command = [sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", str(args.recipe), f"output_dir={run_dir}",
               *args.overrides]
    if (run_dir / "recipe.yaml").is_file() and latest_checkpoint(run_dir) is not None:
        command.append("--resume")
    print(f"pretrain_base: {' '.join(command)} (for at most {args.minutes:g} min)", flush=True)
    run_until(command, time.monotonic() + 60 * args.minutes)
    checkpoint = latest_checkpoint(run_dir)
    done = (run_dir / "final" / "config.json").is_file()
    if not done:
        step = json.loads((checkpoint / "trainer_state.json").read_text())["step"] if checkpoint else 0
        print(f"pretrain_base: paused at step {step} (last checkpoint {checkpoint}); call again to go on", flush=True)
    return done


def run_until(command: list[str], deadline: float, log=None, grace: float = 120) -> int | None:
    """Run ``command`` until it ends or ``time.monotonic()`` passes ``deadline``; then interrupt it as Ctrl-C does
    (the trainer stops cleanly and keeps its last checkpoint), killing it if it has not ended ``grace`` seconds
    later. Its exit status, or None when it was stopped at the deadline, or not started because the deadline had
    passed already (an interrupt at once could land while the interpreter starts and be lost in a library's import,
    so that the command ran to its end anyway)."""
    if time.monotonic() >= deadline:
        return None
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT if log else None,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:  # returns as soon as the command ends
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return None
    return process.returncode


SMALL_STATE = ("scheduler.bin", "random_states_0.pkl")


def write_shards(weights: dict, folder: Path, bf16: bool = False) -> None:
    """``weights`` (in bf16 with ``bf16``) as ``folder``'s model shards of at most :data:`SHARD_BYTES`, replacing
    any shards and index that an earlier write left there (another count of them would mix in)."""
    import torch
    from palimpsa.upgrade.io.shards import save_state_dict_sharded

    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.glob("model*.safetensors"), *folder.glob("model.safetensors.index.json")]:
        stale.unlink()
    if bf16:
        weights = {k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}
    save_state_dict_sharded(weights, folder, SHARD_BYTES, progress=False)


def pack(run_dir: Path, folder: Path) -> None:
    """The run's newest checkpoint in a form that travels (a device call returns at most 64 MB, 16 MB a file, and
    takes at most 64 MB with the repository): the float32 weights in shards of at most 14 MB, Adam's second moments in
    bfloat16 (the first moments are left out: they rebuild in ~10 steps), the optimizer's step counts and groups,
    the scheduler and RNG states, the trainer state and the run's log. ``unpack`` makes a checkpoint of it again."""
    import tarfile

    import torch
    from palimpsa.upgrade.io.shards import save_state_dict_sharded
    from palimpsa.upgrade.train.layout import latest_checkpoint
    from safetensors.torch import load_file

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise SystemExit(f"pretrain_base: {run_dir} has no checkpoint to pack")
    write_shards(load_file(checkpoint / "state" / "model.safetensors"), folder)
    optimizer = torch.load(checkpoint / "state" / "optimizer.bin", map_location="cpu", weights_only=False)
    # in shards too: a larger base's second moments exceed what a device call returns in one file
    (folder / "exp_avg_sq.safetensors").unlink(missing_ok=True)  # an older pack's single file would shadow them
    shutil.rmtree(folder / "exp_avg_sq", ignore_errors=True)
    (folder / "exp_avg_sq").mkdir()
    save_state_dict_sharded({str(i): s["exp_avg_sq"].to(torch.bfloat16).contiguous()
                             for i, s in optimizer["state"].items()}, folder / "exp_avg_sq", SHARD_BYTES,
                            progress=False)
    torch.save({"param_groups": optimizer["param_groups"],
                "steps": {str(i): s["step"] for i, s in optimizer["state"].items()}}, folder / "optimizer_meta.pt")
    with tarfile.open(folder / "small.tgz", "w:gz") as tar:
        for name in ("recipe.yaml", "metrics.jsonl", "eval_summary.json"):
            if (run_dir / name).is_file():
                tar.add(run_dir / name, arcname=name)
        tar.add(checkpoint / "trainer_state.json", arcname=f"{checkpoint.name}/trainer_state.json")
        for name in SMALL_STATE:
            tar.add(checkpoint / "state" / name, arcname=f"{checkpoint.name}/state/{name}")
    print(f"pretrain_base: packed {checkpoint} into {folder}", flush=True)


def unpack(folder: Path, run_dir: Path) -> None:
    """A checkpoint in ``run_dir`` from what ``pack`` wrote (a fresh machine goes on where the last one stopped);
    the trainer state's checksums are rewritten for the rebuilt files."""
    import tarfile

    import torch
    from palimpsa.upgrade.io.manifest import file_manifest
    from safetensors.torch import load_file, save_file

    run_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "small.tgz") as tar:
        names = tar.getnames()
        tar.extractall(run_dir / "unpacking", filter="data")
    staging = run_dir / "unpacking"
    checkpoint = staging / Path(next(n for n in names if n.endswith("trainer_state.json"))).parent
    step_name = checkpoint.name
    for name in ("recipe.yaml", "metrics.jsonl", "eval_summary.json"):
        if (staging / name).is_file():
            shutil.move(staging / name, run_dir / name)
    save_file(packed_weights(folder), checkpoint / "state" / "model.safetensors", metadata={"format": "pt"})
    meta = torch.load(folder / "optimizer_meta.pt", map_location="cpu", weights_only=False)
    if (folder / "exp_avg_sq").is_dir():
        second = {k: v for shard in sorted((folder / "exp_avg_sq").glob("model*.safetensors"))
                  for k, v in load_file(shard).items()}
    else:  # packs written before the moments were sharded
        second = load_file(folder / "exp_avg_sq.safetensors")
    state = {int(i): {"step": meta["steps"][i], "exp_avg": torch.zeros_like(v, dtype=torch.float32),
                      "exp_avg_sq": v.float()} for i, v in second.items()}
    torch.save({"state": state, "param_groups": meta["param_groups"]}, checkpoint / "state" / "optimizer.bin")
    trainer_state = json.loads((checkpoint / "trainer_state.json").read_text())
    files = sorted(str(p.relative_to(checkpoint)) for p in (checkpoint / "state").rglob("*") if p.is_file())
    trainer_state["files"] = file_manifest(checkpoint, files)
    (checkpoint / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2) + "\n")
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    shutil.move(checkpoint, run_dir / "checkpoints" / step_name)
    shutil.rmtree(staging)
    print(f"pretrain_base: unpacked {folder} into {run_dir / 'checkpoints' / step_name}", flush=True)


def packed_weights(folder: Path) -> dict:
    """The weights in ``folder``'s ``model*.safetensors``: ``pack``'s shards, ``--keep-best``'s, or the model-0/-1
    of the first packs."""
    from safetensors.torch import load_file

    weights = {}
    for shard in sorted(folder.glob("model*.safetensors")):
        weights.update(load_file(shard))
    if not weights:
        raise SystemExit(f"pretrain_base: no model*.safetensors in {folder}; give a folder that --pack wrote")
    return weights


def model_from_pack(folder: Path, output: Path, recipe: Path = RECIPE) -> Path:
    """A model directory (``save_pretrained``'s, with the tokenizer) from the weights that ``pack`` wrote, for
    recipes that start from the base as it stood (``model.path``; ``pretrain_base_variants.py --init-pack``)."""
    import torch
    from palimpsa.upgrade.train.recipe import load_recipe
    from palimpsa.upgrade.train.trainer import new_mamba2
    from transformers import AutoTokenizer

    config = load_recipe(recipe)
    weights = packed_weights(folder)
    model = new_mamba2(config)
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # a tensor of another shape
        raise SystemExit(f"pretrain_base: {folder} does not hold {recipe.name}'s model "
                         f"({str(error).splitlines()[-1].strip()[:160]})") from None
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise SystemExit(f"pretrain_base: {folder} does not hold {recipe.name}'s model (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")
    model.tie_weights()
    model.to(torch.float32).save_pretrained(output)
    AutoTokenizer.from_pretrained(config.data.tokenizer).save_pretrained(output)
    return output


def evaluate_bar(model_dir: Path, samples: int, device: str) -> dict:
    """Recall per task and length on haystacks no training document used (pydoc_data.topics, the passkey filler,
    fresh seeds)."""
    import torch
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.evaluate.evaluation import greedy_answers, mqar_accuracy, passkey_correct
    from palimpsa.upgrade.evaluate.tasks import (
        default_long_text,
        fwpkm_niah_samples,
        mqar_gap_samples,
        mqar_gap_setup,
        mqar_samples,
        mqar_token_range,
        passkey_samples,
        repeat_samples,
    )

    model, tokenizer = load_model_and_tokenizer(model_dir)
    model = model.to(device).eval()
    text = " ".join(default_long_text().split())
    depths = DEPTHS
    per_depth = max(1, samples // len(depths))
    seed = 10_000_019  # evaluation seeds, far from the training documents' counter-based seeds
    result: dict[str, list[float]] = {}

    def exact(prompts, check) -> float:
        answers = greedy_answers(model, tokenizer, prompts, batch_size=16)
        return sum(check(a, s.answer) for a, s in zip(answers, prompts)) / len(prompts)

    def repeated(completion: str, answer: str) -> bool:
        return completion.strip().startswith(answer)

    with torch.no_grad():
        result["passkey"] = [exact(passkey_samples(tokenizer, [n], depths, per_depth, seed), passkey_correct)
                             for n in LENGTHS]
        result["niah_fwpkm"] = [exact(fwpkm_niah_samples(tokenizer, text, [n], depths, per_depth, seed + 1),
                                      passkey_correct) for n in LENGTHS]
        result["repeat"] = [exact(repeat_samples(tokenizer, text, [n], samples, seed + 2), repeated)
                            for n in LENGTHS]
        low, high = mqar_token_range(tokenizer, model.config.vocab_size)
        accuracy = mqar_accuracy(model, mqar_samples(high, [32], 32, samples, seed + 3, reserved=low))
        result["mqar_32"] = [accuracy[32]] + [None] * (len(LENGTHS) - 1)  # 32 pairs and queries fill 128 tokens
        by_pairs = mqar_accuracy(model, mqar_samples(high, [2, 8], 8, samples, seed + 5, reserved=low))
        filler, keys, values = mqar_gap_setup(tokenizer, model.config.vocab_size)
        result["mqar_gap_8"] = [mqar_accuracy(model, mqar_gap_samples(filler, keys, values, [n], 8, 8, samples,
                                                                      seed + 4 + n))[8] for n in LENGTHS]
    return {"lengths": list(LENGTHS), "samples_per_length": samples, "accuracy": result,
            "mqar_by_pairs": {"2": by_pairs[2], "8": by_pairs[8], "32": accuracy[32]},  # not part of the bar
            "bar": {task: result[task][0] >= BAR for task in TASKS}, "met": all(result[t][0] >= BAR for t in TASKS)}


def bar_table(report: dict) -> str:
    lines = ["| task | " + " | ".join(f"{n} ({n // 512}x)" for n in report["lengths"]) + " |",
             "|---|" + "---|" * len(report["lengths"])]
    for task in TASKS:
        cells = ["-" if v is None else f"{v:.2f}" for v in report["accuracy"][task]]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    if "mqar_by_pairs" in report:
        lines.append("\nMQAR at 1x by pairs (not part of the bar): " + ", ".join(
            f"{pairs} pairs {value:.2f}" for pairs, value in report["mqar_by_pairs"].items()))
    return "\n".join(lines)


def ship(model_dir: Path, output: Path, report: dict, summary: dict, metrics: Path, recipe: Path) -> None:
    """The model in ``model_dir`` as a bf16 mamba_ssm checkpoint in safetensors shards of at most 15 MB, with its
    card and log (``metrics``, the whole training log; ``recipe``, the last run's recipe)."""
    import torch
    from palimpsa.upgrade.export.export import export_model
    from palimpsa.upgrade.io.manifest import file_manifest
    from palimpsa.upgrade.io.shards import save_state_dict_sharded

    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(scratch) / "mamba2"
        export_model(model_dir, plain, to_mamba2=True, log=None)
        state = torch.load(plain / "pytorch_model.bin", map_location="cpu", weights_only=True)
        config = json.loads((plain / "config.json").read_text())
        staging = Path(scratch) / "base"
        staging.mkdir()
        if config.get("tie_embeddings", True):
            state.pop("lm_head.weight", None)
        names = save_state_dict_sharded({k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}, staging,
                                        15 * 10**6, progress=False)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tokenizer_files = [p.name for p in model_dir.iterdir() if p.name.startswith(("tokenizer", "special_tokens"))]
        for name in tokenizer_files:
            shutil.copy2(model_dir / name, staging / name)
        log = staging / "training"
        log.mkdir()
        shutil.copy2(metrics, log / "metrics.jsonl")
        shutil.copy2(recipe, log / "recipe.yaml")
        (log / "summary.json").write_text(json.dumps({**summary, "bar": report}, indent=2) + "\n")
        (staging / "README.md").write_text(card(config, report, summary))
        files = [*names, "config.json", *tokenizer_files, "README.md"]
        (staging / "export_report.json").write_text(json.dumps({"files": file_manifest(staging, files)}, indent=2)
                                                    + "\n")
        if output.exists():
            shutil.rmtree(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, output)


def card(config: dict, report: dict, summary: dict) -> str:
    ssm = config["ssm_cfg"]
    how = summary.get("training") or (
        f"Pretrained from scratch by `scripts/pretrain_base.py` with `recipes/pretrain-base.yaml`: {summary['steps']} "
        f"steps of 64 x 512 tokens ({summary['tokens'] / 1e9:.2f}B tokens), about a third the Python standard "
        "library's source and two thirds synthetic recall documents (passkey, NIAH in the FwPKM form over "
        "standard-library docstrings, repeat-after-gap, MQAR with 4-64 pairs, MQAR with a gap) with the loss on "
        f"every token, answers weighing 4; bf16, AdamW, cosine schedule; {summary['train_seconds'] / 60:.1f} minutes "
        f"on {summary['device']}.")
    size = f"{summary['parameters'] / 1e6:.1f}M"
    where = ("Not part of the installed package:\nit lives in the repository (`upgrade/assets/recall-base`) for the "
             "experiment and for users who want a small\nmodel that recalls." if report["met"] else
             "It misses its recall bar (below), so no\nexperiment starts from it; it is kept to be trained further.")
    title = ("a {size}-parameter byte-level Mamba2 that recalls within its training length" if report["met"] else
             "a {size}-parameter byte-level Mamba2, short of its recall bar").format(size=size)
    role = ("The base of the long-context experiment (`docs/results/longctx-protocol.md`)." if report["met"] else
            "A candidate base for the long-context experiment (`docs/results/longctx-protocol.md`).")
    return f"""# recall-base: {title}

{role} Mamba2, d_model {config['d_model']},
{config['n_layer']} layers, d_state {ssm['d_state']}, headdim {ssm['headdim']}, expand {ssm['expand']},
{summary['parameters']:,} parameters, byte-level tokenizer (257 ids, vocabulary padded to
{summary['padded_vocab']}); mamba_ssm format, weights in bf16 safetensors. {where}

{how}

## Recall (the bar: at least {BAR:.2f} on each task at 1x)

Held-out haystacks (`pydoc_data.topics` for NIAH and repeat, never trained on), fresh seeds,
{report['samples_per_length']} prompts per task and length, greedy decoding (exact) or the argmax at each MQAR
query:

{bar_table(report)}

Bar {'met' if report['met'] else 'NOT met'}. `training/` holds the metrics, the recipe and this summary.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="recipe overrides (the same every call)")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--run-dir", default=str(ROOT / "runs" / "pretrain-base"))
    parser.add_argument("--output", type=Path, default=ROOT / "upgrade" / "assets" / "recall-base")
    parser.add_argument("--minutes", type=float, default=9.0, help="training time this call (default 9)")
    parser.add_argument("--samples", type=int, default=40, help="prompts per task and length for the bar")
    parser.add_argument("--device", default=None, help="default: cuda when available")
    parser.add_argument("--lengths", default=None, help="bar lengths, comma list (default 512,1024,2048,4096)")
    parser.add_argument("--pack", type=Path, default=None, metavar="DIR",
                        help="after training, write the newest checkpoint to DIR in a compact form that a device "
                        "call can return (about 35 MB for the base)")
    parser.add_argument("--unpack", type=Path, default=None, metavar="DIR",
                        help="when the run has no checkpoint, first rebuild one from DIR (written by --pack)")
    parser.add_argument("--probe", type=int, default=0, metavar="N",
                        help="when the run pauses, check recall at 1x and 2x on its newest checkpoint with N prompts "
                        "per cell (default 0: no check)")
    args = parser.parse_args(argv)
    if args.lengths:
        LENGTHS[:] = [int(n) for n in args.lengths.split(",")]
    started = time.perf_counter()
    from palimpsa.upgrade.train.layout import latest_checkpoint

    if args.unpack and latest_checkpoint(Path(args.run_dir)) is None:
        unpack(args.unpack, Path(args.run_dir))
    finished = train(args)
    if args.pack:
        pack(Path(args.run_dir), args.pack)
    if not finished:
        if args.probe:  # how far recall has come at the newest checkpoint (1x and 2x)
            import torch

            checkpoint = latest_checkpoint(Path(args.run_dir))
            if checkpoint is not None:
                LENGTHS[:] = LENGTHS[:2]
                report = evaluate_bar(checkpoint / "model", args.probe,
                                      args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
                print(f"pretrain_base: recall at {checkpoint.name} ({args.probe} prompts per cell)\n"
                      + bar_table(report), flush=True)
        return 0
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    run_dir = Path(args.run_dir)
    report = evaluate_bar(run_dir / "final", args.samples, device)
    print(bar_table(report), flush=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    import yaml

    recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    steps = max(row["step"] for row in rows)
    final_config = json.loads((run_dir / "final" / "config.json").read_text())
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(run_dir / "final", need_tokenizer=False)
    summary = {"steps": steps, "tokens": steps * recipe["data"]["batch_size"] * recipe["data"]["seq_len"],
               "train_seconds": sum(_seconds(rows)), "parameters": sum(p.numel() for p in model.parameters()),
               "padded_vocab": final_config["vocab_size"], "python": platform.python_version(),
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "final_eval": next((r for r in reversed(rows) if "eval_nll" in r), None)}
    ship(run_dir / "final", args.output, report, summary, run_dir / "metrics.jsonl", run_dir / "recipe.yaml")
    print(f"pretrain_base: wrote {args.output} (bar {'met' if report['met'] else 'NOT met'}) in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return 0


def windows(rows: list[dict]) -> list[tuple[int, float]]:
    """(steps, seconds) of each logged training window, from its throughput: the window's tokens over its tokens
    per second."""
    found, last = [], 0
    for row in rows:
        if row.get("tokens_per_s"):
            found.append((row["step"] - last, (row["step"] - last) * row["tokens"] / row["tokens_per_s"]))
            last = row["step"]
    return found


def _seconds(rows: list[dict]) -> list[float]:
    """Training time from the logged throughput, per logged window."""
    return [seconds for _, seconds in windows(rows)]


if __name__ == "__main__":
    sys.exit(main())
