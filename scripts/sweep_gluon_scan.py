"""Sweep the Gluon forward's mappings on one GPU: each checked against float64, then timed beside the Triton path.

Every variant of ``gluon_scan.FWD_VARIANTS`` (and ``triton``, the baseline of the same run) is

1. checked on a quick subset of ``check_scan_gpu.py``'s cases (80 heads, P = 64, N = 128; outputs, final states,
   uncertainty and every gradient through the Triton backward on the variant's checkpoints, against float64
   references computed once for all variants): two batches of 128 tokens against the sequential reference, an
   odd-length bf16 sequence over four chunks, packed sequences of 300 / 1 / 250 / 449 tokens with states in
   and out, and a no-beta sequence with ``I0 = None``;
2. timed (``do_bench`` medians, bf16, 2.7b shapes): forward at B = 1 and 4, L = 8192, and forward + (Triton)
   backward at B = 1, L = 8192.

The variants run in one worker process, one after another; a variant that crashes the worker (an illegal memory
access ends the CUDA context) or runs past ``--variant-timeout`` is recorded as failed and a new worker goes on with
the rest. Writes ``sweep.json`` (every number), ``sweep.txt`` (the table, also printed) and ``sweep-winner.txt``
(the fastest variant that passed, at B = 1, L = 8192; then at B = 4) into the output directory.

    python scripts/sweep_gluon_scan.py OUT_DIR [--variants a,b,...] [--variant-timeout 60] [--total-timeout 240]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
TIMED = (("fwd", 1, 8192), ("fwd", 4, 8192), ("fwdbwd", 1, 8192))


def _quick_cases():
    """``(name, inputs, tol, prior, cu_seqlens, reference)``: check_scan_gpu's kinds of case, shorter."""
    import torch
    from check_scan_gpu import make_inputs

    f32, bf16 = torch.float32, torch.bfloat16
    bounds = torch.tensor([0, 300, 301, 551, 1000], dtype=torch.int32, device="cuda")
    return [
        ("B2 L128 G2 f32 beta state", make_inputs(2, 128, 2, f32, seed=11), 1e-5, 0.7, None, "naive"),
        ("B1 L999 G1 bf16 beta", make_inputs(1, 999, 1, bf16, with_state=False, seed=12), 1e-2, 1.0, None, "torch"),
        ("varlen 300/1/250/449 G2 f32 beta state", make_inputs(1, 1000, 2, f32, n_states=4, seed=13), 1e-5, 0.7,
         bounds, "torch"),
        ("B1 L1030 G1 f32 no-beta (M0, None)",
         make_inputs(1, 1030, 1, f32, with_beta=False, with_importance=False, seed=14), 1e-5, 1.0, None, "torch"),
    ]


class Worker:
    """Runs in the worker process: references and timing inputs made once, then one variant after another."""

    def __init__(self):
        import torch
        from check_scan_gpu import outputs_and_grads, run_checkpointed_torch, run_op, shapes_of

        self.cases = []
        for name, inputs, tol, prior, cu_seqlens, reference in _quick_cases():
            gen = torch.Generator(device="cuda").manual_seed(7)
            weights = [torch.randn(s, generator=gen, device="cuda", dtype=torch.float64)
                       for s in shapes_of(inputs, cu_seqlens)]
            exact = {n: None if t is None else t.double() for n, t in inputs.items()}
            if reference == "naive":
                runner = lambda x, p=prior, c=cu_seqlens: run_op(x, "naive", p, c)  # noqa: E731
            else:
                runner = lambda x, p=prior, c=cu_seqlens: run_checkpointed_torch(x, p, c)  # noqa: E731
            want = outputs_and_grads(exact, runner, weights)
            self.cases.append((name, inputs, tol, prior, cu_seqlens, weights, want))
        self.timing_inputs = {}

    def check(self, name: str) -> dict:
        from check_scan_gpu import GRADS, OUTPUTS, outputs_and_grads, relative_error, run_op

        backend = "triton" if name == "triton" else "gluon"
        worst, rows = 0.0, []
        for case, inputs, tol, prior, cu_seqlens, weights, (want, want_grads) in self.cases:
            got, got_grads = outputs_and_grads(
                inputs, lambda x, p=prior, c=cu_seqlens: run_op(x, backend, p, c), weights)
            errors = {label: relative_error(g, w) for label, g, w in zip(OUTPUTS, got, want, strict=True)}
            errors.update({"d" + label: relative_error(got_grads[label], want_grads[label]) for label in GRADS
                           if label in want_grads})
            ratio = max(errors.values()) / tol
            worst = max(worst, ratio)
            rows.append({"case": case, "tol": tol, "errors": errors, "worst_over_tol": ratio})
        return {"checks": rows, "worst_over_tol": worst, "passed": worst <= 1.0}

    def time(self, name: str) -> dict:
        import torch
        from bench_scan import ours, scan_inputs
        from triton.testing import do_bench

        times = {}
        for kind, batch, length in TIMED:
            if (batch, length) not in self.timing_inputs:
                self.timing_inputs[(batch, length)] = scan_inputs(batch, length)
            inputs = self.timing_inputs[(batch, length)]
            if name == "triton":
                fwd, fwd_bwd = ours(inputs, backend="triton")
            else:
                fwd, fwd_bwd = ours(inputs, fwd_config={"kernel": "gluon", "variant": name})
            fn = fwd if kind == "fwd" else fwd_bwd
            times[f"{kind}_B{batch}_L{length}_ms"] = do_bench(fn, warmup=25, rep=150, return_mode="median")
            torch.cuda.synchronize()
        return times


def worker_main(names: list[str], rows_path: str, progress_path: str) -> int:
    sys.path.insert(0, SCRIPTS)
    import torch
    from palimpsa.kernels import fused_recurrent, gluon_scan

    fused_recurrent.POISON_OUTPUTS = True  # every output starts NaN: an unwritten element fails the check
    t0 = time.time()
    worker = Worker()
    print(f"worker: float64 references of {len(worker.cases)} cases in {time.time() - t0:.1f} s", flush=True)
    for name in names:
        with open(progress_path, "a") as f:
            f.write(json.dumps({"start": name, "time": time.time()}) + "\n")
        row = {"variant": name}
        if name != "triton":
            row["mapping"] = gluon_scan.FWD_VARIANTS[name]._asdict()
            os.environ[gluon_scan.FWD_VARIANT_ENV] = name
        t0 = time.time()
        try:
            row.update(worker.check(name))
            row.update(worker.time(name))
        except Exception as error:  # noqa: BLE001 - record it, go on with the next variant
            traceback.print_exc()
            row["error"] = f"{type(error).__name__}: {error}"[:500]
        row["seconds"] = time.time() - t0
        torch.cuda.empty_cache()
        with open(rows_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"worker: {name} done in {row['seconds']:.1f} s", flush=True)
    return 0


def _read_jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def drive(out: str, names: list[str], variant_timeout: float, total_timeout: float, worker: list[str] | None = None,
          startup: float = 60.0) -> list[dict]:
    """Run the workers until every variant has a row (done, failed or timed out) or the total time is spent.

    ``worker``: the command that starts a worker (default: this script's ``--worker``), given the remaining
    names (comma-separated), the rows file and the progress file as its last three arguments. ``startup``: the
    seconds a new worker may take before its first variant starts (the float64 references)."""
    worker = worker or [sys.executable, os.path.abspath(__file__), "--worker"]
    rows_path, progress_path = os.path.join(out, "sweep-rows.jsonl"), os.path.join(out, "sweep-progress.jsonl")
    for path in (rows_path, progress_path):
        if os.path.exists(path):
            os.remove(path)
    deadline = time.time() + total_timeout
    failed: list[dict] = []
    log = open(os.path.join(out, "sweep-worker.log"), "a")
    while True:
        done = {r["variant"] for r in _read_jsonl(rows_path)} | {r["variant"] for r in failed}
        remaining = [n for n in names if n not in done]
        if not remaining:
            break
        if time.time() > deadline:
            failed += [{"variant": n, "error": "not run: the sweep's total time was spent"} for n in remaining]
            break
        proc = subprocess.Popen([*worker, ",".join(remaining), rows_path, progress_path], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        started_at = time.time() + startup
        while proc.poll() is None:
            time.sleep(0.5)
            progress = [p for p in _read_jsonl(progress_path) if p["start"] in remaining]
            done_now = {r["variant"] for r in _read_jsonl(rows_path)}
            current = next((p for p in reversed(progress) if p["start"] not in done_now), None)
            if current is not None:
                started_at = current["time"]
            if time.time() - started_at > variant_timeout or time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                name = current["start"] if current else remaining[0]
                failed.append({"variant": name, "error": f"timed out after {variant_timeout:.0f} s"})
                break
        else:
            done_now = {r["variant"] for r in _read_jsonl(rows_path)}
            progress = [p["start"] for p in _read_jsonl(progress_path)]
            crashed = next((n for n in reversed(progress) if n in remaining and n not in done_now), None)
            if crashed is not None:
                failed.append({"variant": crashed, "error": f"the worker died (exit {proc.returncode}); see "
                                                            "sweep-worker.log"})
            elif proc.returncode != 0:  # died before the first variant (the references): nothing more will run
                failed += [{"variant": n, "error": f"the worker died before it (exit {proc.returncode}); see "
                                                   "sweep-worker.log"} for n in remaining]
    log.close()
    rows = {r["variant"]: r for r in _read_jsonl(rows_path) + failed}
    return [rows[n] for n in names if n in rows]


def offline_numbers(out: str) -> dict:
    """The compile-time numbers of ``inspect_gluon_scan.py --json OUT/inspect.json``, if it ran, by variant."""
    path = os.path.join(out, "inspect.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        variants = json.load(f).get("variants", {})
    return {name.removeprefix("fwd-"): r for name, r in variants.items() if name.startswith("fwd-")}


def table(rows: list[dict], offline: dict) -> str:
    triton = next((r for r in rows if r["variant"] == "triton" and "error" not in r), {})
    keys = [f"{kind}_B{b}_L{length}_ms" for kind, b, length in TIMED]
    lines = ["Gluon forward variants (bf16, H=80 P=64 N=128 G=1; ms are do_bench medians; x = triton / variant, so "
             "x > 1 is faster than Triton; fwdbwd = the variant's forward + the Triton backward on its checkpoints;"
             " check = worst error / tolerance over the quick float64 checks, <= 1 passes; reg / SASS = registers "
             "and SASS instructions per element-token (main path) from inspect_gluon_scan.py)",
             f"{'variant':12} {'CPT':>3} {'LV':>2} {'NW':>2} {'U':>1} {'SQK':>3} {'reg':>4} {'SASS':>5} "
             f"{'elem':>4} | {'check':>6} | " + " | ".join(f"{k.removesuffix('_ms'):>18}" for k in keys)]
    for r in rows:
        m = r.get("mapping", {})
        o = offline.get(r["variant"], {})
        head = (f"{r['variant']:12} {m.get('CPT', '-'):>3} {m.get('LV', '-'):>2} {m.get('NW', '-'):>2} "
                f"{m.get('U', '-'):>1} {('y' if m.get('SQK') else 'n') if m else '-':>3} "
                f"{o.get('registers', '-'):>4} "
                f"{format(o['instructions_per_element'], '.2f') if 'instructions_per_element' in o else '-':>5} "
                f"{o.get('elements_per_thread', '-'):>4}")
        if "error" in r and "worst_over_tol" not in r:
            lines.append(f"{head} | FAILED: {r['error'][:150]}")
            continue
        cells = []
        for k in keys:
            if k in r:
                ratio = triton[k] / r[k] if k in triton else float("nan")
                cells.append(f"{r[k]:8.3f} ({ratio:5.2f}x)")
            else:
                cells.append(f"{'-':>18}")
        verdict = f"{r['worst_over_tol']:6.3f}" + ("" if r["passed"] else " FAIL")
        lines.append(f"{head} | {verdict} | " + " | ".join(cells) + (f"  error: {r['error'][:100]}"
                                                                     if "error" in r else ""))
    return "\n".join(lines)


def winners(rows: list[dict]) -> dict:
    """The fastest passing variant (not triton) for each timed forward shape."""
    result = {}
    for kind, batch, length in TIMED:
        key = f"{kind}_B{batch}_L{length}_ms"
        timed = [r for r in rows if r["variant"] != "triton" and r.get("passed") and key in r]
        if timed:
            best = min(timed, key=lambda r: r[key])
            result[key] = {"variant": best["variant"], "ms": best[key]}
    return result


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2].split(","), sys.argv[3], sys.argv[4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output directory")
    parser.add_argument("--variants", help="comma-separated names (default: triton and every FWD_VARIANTS entry)")
    parser.add_argument("--variant-timeout", type=float, default=60.0, help="seconds per variant")
    parser.add_argument("--total-timeout", type=float, default=240.0, help="seconds for the whole sweep")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from palimpsa.kernels import gluon_scan

    names = args.variants.split(",") if args.variants else ["triton", *gluon_scan.FWD_VARIANTS]
    unknown = [n for n in names if n != "triton" and n not in gluon_scan.FWD_VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(gluon_scan.FWD_VARIANTS)}")
    t0 = time.time()
    rows = drive(args.out, names, args.variant_timeout, args.total_timeout)
    offline = offline_numbers(args.out)
    best = winners(rows)
    text = table(rows, offline)
    text += "\n\nfastest passing variant: " + (", ".join(f"{k.removesuffix('_ms')} {w['variant']} ({w['ms']:.3f} ms)"
                                                          for k, w in best.items()) or "none")
    text += f"\nsweep took {time.time() - t0:.0f} s"
    print(text)
    with open(os.path.join(args.out, "sweep.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"rows": rows, "winners": best, "offline": offline, "timed": TIMED}, f, indent=1)
    with open(os.path.join(args.out, "sweep-winner.txt"), "w") as f:
        for key in ("fwd_B1_L8192_ms", "fwd_B4_L8192_ms"):
            f.write(best.get(key, {}).get("variant", "") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
