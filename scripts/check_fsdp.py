"""Several processes against one: the tiny recipe fine-tuned on one device with gradient accumulation N and by N
processes at the same global batch (FSDP on GPUs, ``recipes/accelerate/fsdp-2gpu.yaml``), with the shipped
activation checkpointing on and off, the recipe's beta parameterisation and LoRA; then one rank killed after the
first checkpoint and the run resumed with ``--resume`` on N processes.

    python scripts/check_fsdp.py OUT                  # two GPUs, FSDP (what scripts/check_fsdp.sh runs)
    python scripts/check_fsdp.py OUT --cpu            # the same flow over gloo data parallelism, on the CPU

It reports, per checkpointing setting: the held-out NLL of both runs at each evaluation, the largest weight
difference (and the tensor it is in), the N-process model loaded on one device against the one-device model
(largest logit difference), tokens/s per device and the scaling efficiency (N-process tokens/s over N times the
one-device tokens/s), peak memory per device (GPU only); and for the killed run, that the launch failed, the
resume finished, and its weights against the uninterrupted N-process run's. Everything goes to
``OUT/report.json``; the exit status is 1 when a comparison is outside its tolerance. Each run's log is
``OUT/<setting>/<run>.log``.

The weights' tolerance is measured, not assumed: the one-device run is repeated, and on a GPU two runs of the
same recipe differ (the scan's backward sums ``dk``, ``dq`` with float atomics, in no fixed order; Adam with the
beta parameters' small epsilon, ``optim.beta_eps`` 1e-12, turns such last-bit differences of the gate's tiny
gradients into weight differences of 1e-4 to 2e-3 within 30 steps: docs/bench/fsdp-h100x2-2026-11-26). The
N-process run and the resumed run must lie within ``NOISE_FACTOR`` times that repeat difference, and at least
within ``TOLERANCE``: 1e-4 for the N-process run, since even where a repeat is exact (the CPU) N processes sum the
gradients in another order than one process accumulating them (1.7e-5 in ``beta_up.weight`` after 4 steps on the
CPU, 2026-11-26), and 1e-5 for the resumed run, which repeats the uninterrupted one's sums (on the CPU it equals
it). A difference that is not a number fails.
The held-out NLL and the logits of the saved models are the checks of what the models compute.
``--repeat-only`` runs only the two one-device runs: that floor on a machine with one GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from palimpsa.upgrade.train.layout import complete_checkpoints

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
FSDP_CONFIG = ROOT / "recipes" / "accelerate" / "fsdp-2gpu.yaml"
TOLERANCE = {"nll": 1e-4, "weights": 1e-4, "logits": 1e-4, "resumed": 1e-5}
NOISE_FACTOR = 10  # weights of a run against another: within this many times what a repeated run differs by


def overrides(steps: int, checkpointing: bool, seq_len: int) -> list[str]:
    return [f"data.seq_len={seq_len}", "data.batch_size=2", "eval.passkey_samples=1", "eval.batches=2",
            f"eval.every={max(1, steps // 2)}", "logging.tensorboard=false", f"train.max_steps={steps}",
            "train.log_every=1", f"checkpoint.every={max(1, steps // 2)}", "checkpoint.keep=2",
            "train.mixed_precision=no", f"model.gradient_checkpointing={'true' if checkpointing else 'false'}"]


def launcher(processes: int, cpu: bool) -> list[str]:
    """``accelerate launch`` as a user types it (the one beside this Python)."""
    accelerate = str(Path(sys.executable).parent / "accelerate")
    module = ["-m", "palimpsa.upgrade.cli.finetune_model"]
    if cpu:
        return [accelerate, "launch", "--cpu", "--num_processes", str(processes), *module]
    return [accelerate, "launch", "--config_file", str(FSDP_CONFIG), "--num_processes", str(processes),
            "--mixed_precision", "no", *module]


def run(command: list[str], log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode


def run_and_kill_a_rank(command: list[str], log: Path, output_dir: Path, timeout: float = 900) -> tuple[int, int]:
    """Start ``command`` (a launcher of several ranks), wait for its first complete checkpoint, SIGKILL one rank
    (not the launcher): the launcher's exit status and the pid killed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        launch = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        deadline, killed = time.monotonic() + timeout, 0
        while launch.poll() is None and time.monotonic() < deadline:
            if complete_checkpoints(output_dir):
                ranks = _ranks(launch.pid)
                if ranks:
                    killed = ranks[max(ranks)]  # the last rank: never the launcher nor an agent between them
                    os.kill(killed, signal.SIGKILL)
                    break
            time.sleep(0.2)
        try:
            code = launch.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            code = launch.wait()
    return code, killed


def _ranks(launcher: int) -> dict[int, int]:
    """The launch's ranks, ``{RANK: pid}``: its descendants whose environment names a rank (torchrun and accelerate
    set ``RANK`` in each worker, not in themselves)."""
    ranks = {}
    for pid in _descendants(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((item[5:] for item in environ if item.startswith(b"RANK=")), None)
        if rank is not None and rank.isdigit():
            ranks[int(rank)] = pid
    return ranks


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def compare(one: Path, many: Path, processes: int, device: str) -> dict:
    """The two runs' evaluations, weights, logits on one device, speed and memory."""
    import torch
    from palimpsa.upgrade import PalimpsaForCausalLM

    rows = {"one": metrics(one), "many": metrics(many)}
    nll = {name: [r["eval_nll"] for r in rows[name] if "eval_nll" in r] for name in rows}
    speed = {name: [r["tokens_per_s"] for r in rows[name] if "tokens_per_s" in r][1:] for name in rows}  # past step 1
    memory = {name: max((r.get("peak_memory_gib", 0.0) for r in rows[name]), default=0.0) or None for name in rows}
    a = PalimpsaForCausalLM.from_pretrained(str(one / "final")).to(device).eval()
    b = PalimpsaForCausalLM.from_pretrained(str(many / "final")).to(device).eval()
    weights, where = largest_difference(a, b)
    ids = torch.randint(0, a.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        logits = (a(ids).logits - b(ids).logits).abs().max().item()
    one_speed = sum(speed["one"]) / max(1, len(speed["one"]))
    many_speed = sum(speed["many"]) / max(1, len(speed["many"]))
    return {"eval_nll": nll, "nll_max_diff": max((abs(x - y) for x, y in zip(*nll.values())), default=None),
            "weights_max_diff": weights, "weights_max_diff_in": where, "logits_max_diff_on_one_device": logits,
            "tokens_per_s": {"one": one_speed, "many": many_speed, "many_per_device": many_speed / processes},
            "scaling_efficiency": many_speed / (processes * one_speed) if one_speed else None,
            "peak_memory_gib": {"one": memory["one"], "many_per_device": memory["many"]}}


def largest_difference(a, b) -> tuple[float | None, str | None]:
    """The largest elementwise difference between two models' weights and the tensor it is in; (None, None) when
    their parameters differ."""
    sa, sb = a.state_dict(), b.state_dict()
    if sa.keys() != sb.keys():
        return None, None
    differences = {k: (sa[k].float() - sb[k].float()).abs().max().item() for k in sa}
    name = max(differences, key=lambda k: math.inf if math.isnan(differences[k]) else differences[k])
    return differences[name], name if differences[name] else None


def weights_diff(a_dir: Path, b_dir: Path) -> tuple[float | None, str | None]:
    from palimpsa.upgrade import PalimpsaForCausalLM

    return largest_difference(PalimpsaForCausalLM.from_pretrained(str(a_dir)),
                              PalimpsaForCausalLM.from_pretrained(str(b_dir)))


def within(value: float | None, limit: float) -> bool:
    """A measured difference inside its limit: None (nothing to compare) and NaN are not."""
    return value is not None and value <= limit


def weights_limit(repeat: float | None, name: str) -> float:
    """What two runs' weights may differ by: ``NOISE_FACTOR`` times a repeated run's difference, at least the
    float tolerance ``TOLERANCE[name]``."""
    return max(TOLERANCE[name], NOISE_FACTOR * (repeat or 0.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a new folder for the runs and report.json")
    parser.add_argument("--processes", type=int, default=2, help="N (default 2)")
    parser.add_argument("--cpu", action="store_true", help="gloo data parallelism on the CPU instead of FSDP")
    parser.add_argument("--steps", type=int, default=30, help="fine-tuning steps per run (default 30)")
    parser.add_argument("--seq-len", type=int, default=256, help="default 256")
    parser.add_argument("--checkpointing", choices=("both", "on", "off"), default="both",
                        help="activation checkpointing settings to check (default both; the kill runs with the first)")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed rank and the resume")
    parser.add_argument("--repeat-only", action="store_true",
                        help="only the one-device run and its repeat: how far two runs of the same recipe lie apart "
                             "on this machine (one GPU is enough)")
    args = parser.parse_args(argv)
    if args.processes < 2:
        parser.error("--processes: give 2 or more")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty; give a new folder")
    import torch

    if not args.cpu and not args.repeat_only and torch.cuda.device_count() < args.processes:
        parser.error(f"{torch.cuda.device_count()} GPU(s) here, {args.processes} needed; --cpu checks the flow on "
                     "the CPU")
    device = "cpu" if args.cpu else "cuda"
    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.checkpointing]
    report: dict = {"processes": args.processes, "launch": "gloo data parallelism (CPU)" if args.cpu else "FSDP",
                    "steps": args.steps, "device": torch.cuda.get_device_name() if not args.cpu else "CPU",
                    "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "runs": {}}
    failures = []
    for index, checkpointing in enumerate(settings):
        name = "checkpointing-on" if checkpointing else "checkpointing-off"
        folder = args.out / name
        common = [str(RECIPE), *overrides(args.steps, checkpointing, args.seq_len)]
        for run_name in ("one", "one-again"):
            print(f"check_fsdp: {name}: one device with gradient accumulation {args.processes} ({run_name})",
                  flush=True)
            code = run([sys.executable, "-m", "palimpsa.upgrade.cli.finetune_model", *common,
                        f"train.grad_accum={args.processes}", f"output_dir={folder / run_name}"],
                       folder / f"{run_name}.log")
            if code:
                raise SystemExit(f"check_fsdp: the one-device run failed (exit {code}); see "
                                 f"{folder / f'{run_name}.log'}")
        repeat, repeat_where = weights_diff(folder / "one" / "final", folder / "one-again" / "final")
        noise = {"weights_max_diff_repeat": repeat, "weights_max_diff_repeat_in": repeat_where,
                 "weights_limit": weights_limit(repeat, "weights")}
        if args.repeat_only:
            report["runs"][name] = noise
            print(f"check_fsdp: {name}: {json.dumps(noise)}", flush=True)
            continue
        print(f"check_fsdp: {name}: {args.processes} processes", flush=True)
        command = launcher(args.processes, args.cpu) + common
        code = run(command + [f"output_dir={folder / 'many'}"], folder / "many.log")
        if code:
            raise SystemExit(f"check_fsdp: the {args.processes}-process run failed (exit {code}); see "
                             f"{folder / 'many.log'}")
        result = {**compare(folder / "one", folder / "many", args.processes, device), **noise}
        for key, limit in (("nll_max_diff", TOLERANCE["nll"]), ("weights_max_diff", noise["weights_limit"]),
                           ("logits_max_diff_on_one_device", TOLERANCE["logits"])):
            if not within(result[key], limit):
                failures.append(f"{name}: {key} {result[key]} > {limit}")
        if index == 0 and not args.no_kill:
            killed_dir = folder / "killed"
            print(f"check_fsdp: {name}: {args.processes} processes, one rank killed after the first checkpoint",
                  flush=True)
            code, pid = run_and_kill_a_rank(command + [f"output_dir={killed_dir}"], folder / "killed.log", killed_dir)
            kill = {"killed_pid": pid, "launcher_exit": code}
            if not pid or code == 0:
                failures.append(f"{name}: no rank was killed mid-run (pid {pid}, launcher exit {code})")
            else:
                print(f"check_fsdp: {name}: --resume on {args.processes} processes", flush=True)
                code = run(command + [f"output_dir={killed_dir}", "--resume"], folder / "resumed.log")
                kill["resume_exit"] = code
                if code:
                    failures.append(f"{name}: the resume failed (exit {code}); see {folder / 'resumed.log'}")
                else:
                    resumed, where = weights_diff(killed_dir / "final", folder / "many" / "final")
                    limit = weights_limit(repeat, "resumed")
                    kill.update(weights_max_diff_to_uninterrupted=resumed, weights_max_diff_in=where,
                                weights_limit=limit)
                    if not within(resumed, limit):
                        failures.append(f"{name}: the resumed run's weights differ by {resumed} > {limit}")
            result["kill_and_resume"] = kill
        report["runs"][name] = result
        print(f"check_fsdp: {name}: {json.dumps(result)}", flush=True)
    report["tolerances"], report["noise_factor"], report["failures"] = TOLERANCE, NOISE_FACTOR, failures
    from palimpsa.upgrade.io.output import write_text_atomic

    write_text_atomic(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    print(f"check_fsdp: {'all checks hold' if not failures else 'FAILED: ' + '; '.join(failures)} "
          f"({args.out / 'report.json'})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
