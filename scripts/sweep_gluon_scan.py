"""Sweep the Gluon kernels' mappings on one GPU: each checked against float64, then timed beside the Triton path.

Every forward variant of ``gluon_scan.FWD_VARIANTS`` (and ``triton``, the baseline of the same run) is

1. checked on a quick subset of ``check_scan_gpu.py``'s cases (80 heads, P = 64, N = 128; outputs, final states,
   uncertainty and every gradient through the Triton backward on the variant's checkpoints, against float64
   references computed once for all variants): two batches of 128 tokens in two groups against the sequential
   reference, and packed sequences of 300 / 1 / 250 / 449 tokens with states in and out (``triton`` also an
   odd-length bf16 sequence over four chunks and a no-beta one with ``I0 = None``; the winner then gets all of
   check_scan_gpu.py: bf16, 16k tokens);
2. timed (``do_bench`` medians, bf16, 2.7b shapes): forward at B = 1 and 4, L = 8192, and forward + (Triton)
   backward at B = 1, L = 8192.

Every backward variant of ``gluon_scan.BWD_VARIANTS`` (rows ``bwd:<name>``) is checked on two of those cases (the
Gluon forward's default variant before it) and timed after the Triton forward at B = 1, L = 8192: its backward
alone is forward + backward minus that forward. ``-probe-`` variants leave work out to show what it costs: timed,
not checked, never chosen.

The variants run in one worker process, one after another; a variant that crashes the worker (an illegal memory
access ends the CUDA context) or runs past ``--variant-timeout`` is recorded as failed and a new worker goes on with
the rest. Writes ``sweep.json`` (every number), ``sweep.txt`` (the table, also printed) and ``sweep-winner.txt``
(line 1: the fastest forward that passed at B = 1, L = 8192; line 2: at B = 4; line 3: the fastest backward
that passed, if it beats Triton's) into the output directory.

    python scripts/sweep_gluon_scan.py OUT_DIR [--variants a,b,...] [--variant-timeout 60] [--total-timeout 240]
    python scripts/sweep_gluon_scan.py OUT_DIR --retable   # sweep.txt again, with OUT_DIR/inspect.json's numbers
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
BWD_TIMED = (("fwd", 1, 8192), ("fwdbwd", 1, 8192))  # backward rows: the Triton forward, then with the backward
FWD_CASES = (0, 2)  # which quick cases check a forward variant (each case is a compile of it: time is short)
BWD_CASES = (0, 2)  # which check a backward variant


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
        if name == "triton":
            cases = self.cases
        else:
            cases = [self.cases[i] for i in (BWD_CASES if name.startswith("bwd:") else FWD_CASES)]
        worst, rows = 0.0, []
        for case, inputs, tol, prior, cu_seqlens, weights, (want, want_grads) in cases:
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
        from palimpsa.kernels import fused_recurrent
        from triton.testing import do_bench

        times = {}
        for kind, batch, length in BWD_TIMED if name.startswith("bwd:") else TIMED:
            if (batch, length) not in self.timing_inputs:
                self.timing_inputs[(batch, length)] = scan_inputs(batch, length)
            inputs = self.timing_inputs[(batch, length)]
            if name == "triton":
                fwd, fwd_bwd = ours(inputs, backend="triton")
            elif name.startswith("bwd:"):
                fwd, fwd_bwd = ours(inputs, fwd_config=fused_recurrent.FWD_CONFIG,
                                    bwd_config={"kernel": "gluon", "variant": name.removeprefix("bwd:")})
            else:
                fwd, fwd_bwd = ours(inputs, fwd_config={"kernel": "gluon", "variant": name})
            fn = fwd if kind == "fwd" else fwd_bwd
            times[f"{kind}_B{batch}_L{length}_ms"] = do_bench(fn, warmup=25, rep=150, return_mode="median")
            torch.cuda.synchronize()
        if name.startswith("bwd:") or name == "triton":
            times["bwd_B1_L8192_ms"] = times["fwdbwd_B1_L8192_ms"] - times["fwd_B1_L8192_ms"]
        return times


def worker_main(names: list[str], rows_path: str, progress_path: str) -> int:
    sys.path.insert(0, SCRIPTS)
    import torch
    from palimpsa.kernels import fused_recurrent, gluon_scan, scan

    fused_recurrent.POISON_OUTPUTS = True  # every output starts NaN: an unwritten element fails the check
    t0 = time.time()
    worker = Worker()
    print(f"worker: float64 references of {len(worker.cases)} cases in {time.time() - t0:.1f} s", flush=True)
    for name in names:
        with open(progress_path, "a") as f:
            f.write(json.dumps({"start": name, "time": time.time()}) + "\n")
        row = {"variant": name}
        os.environ.pop(gluon_scan.FWD_VARIANT_ENV, None)
        os.environ.pop(gluon_scan.BWD_VARIANT_ENV, None)
        os.environ.pop(scan.GLUON_BACKWARD_ENV, None)
        if name.startswith("bwd:"):
            row["mapping"] = gluon_scan.BWD_VARIANTS[name.removeprefix("bwd:")]._asdict()
            os.environ[gluon_scan.BWD_VARIANT_ENV] = name.removeprefix("bwd:")
            os.environ[scan.GLUON_BACKWARD_ENV] = "1"
        elif name != "triton":
            row["mapping"] = gluon_scan.FWD_VARIANTS[name]._asdict()
            os.environ[gluon_scan.FWD_VARIANT_ENV] = name
        t0 = time.time()
        try:
            if "-probe-" in name:
                row["probe"] = True  # leaves work out: its gradients are wrong by design
            else:
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
          startup: float = 150.0) -> list[dict]:
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
    found = {name.removeprefix("fwd-"): r for name, r in variants.items() if name.startswith("fwd-")}
    found.update({"bwd:" + name.removeprefix("bwd-"): r for name, r in variants.items() if name.startswith("bwd-")})
    return found


def _mapping(name: str) -> dict:
    """A variant's constexprs from the tables (rows of crashed variants have none of their own)."""
    try:
        from palimpsa.kernels import gluon_scan
    except ImportError:
        return {}
    if name.startswith("bwd:"):
        found = gluon_scan.BWD_VARIANTS.get(name.removeprefix("bwd:"))
    else:
        found = gluon_scan.FWD_VARIANTS.get(name)
    return {} if found is None else found._asdict()


def _cells(r: dict, triton: dict, keys: list[str]) -> str:
    cells = []
    for k in keys:
        if k in r:
            ratio = triton[k] / r[k] if k in triton else float("nan")
            cells.append(f"{r[k]:8.3f} ({ratio:5.2f}x)")
        else:
            cells.append(f"{'-':>18}")
    return " | ".join(cells)


def _verdict(r: dict) -> str:
    if r.get("probe"):
        return f"{'probe':>6}"
    return f"{r['worst_over_tol']:6.3f}" + ("" if r["passed"] else " FAIL")


def table(rows: list[dict], offline: dict) -> str:
    """The forward table, then the backward table; triton's row in both, as the baseline."""
    triton = next((r for r in rows if r["variant"] == "triton" and "error" not in r), {})
    keys = [f"{kind}_B{b}_L{length}_ms" for kind, b, length in TIMED]
    lines = ["Gluon forward variants (bf16, H=80 P=64 N=128 G=1; ms are do_bench medians; x = triton / variant, so "
             "x > 1 is faster than Triton; fwdbwd = the variant's forward + the Triton backward on its checkpoints;"
             " check = worst error / tolerance over the quick float64 checks, <= 1 passes; reg / SASS = registers "
             "and SASS instructions per element-token (main path) from inspect_gluon_scan.py; elem = state "
             "elements per thread; CPT channels per thread, LV lanes along channels, NW warps per program, U tokens "
             "per branch-free group, SQK k^2 squared in the kernel)",
             f"{'variant':12} {'CPT':>3} {'LV':>2} {'NW':>2} {'U':>1} {'SQK':>3} {'reg':>4} {'SASS':>5} "
             f"{'elem':>4} | {'check':>6} | " + " | ".join(f"{k.removesuffix('_ms'):>18}" for k in keys)]
    for r in rows:
        if r["variant"].startswith("bwd:"):
            continue
        m = r.get("mapping") or _mapping(r["variant"])
        o = offline.get(r["variant"], {})
        head = (f"{r['variant']:12} {m.get('CPT', '-'):>3} {m.get('LV', '-'):>2} {m.get('NW', '-'):>2} "
                f"{m.get('U', '-'):>1} {('y' if m.get('SQK') else 'n') if m else '-':>3} "
                f"{o.get('registers', '-'):>4} "
                f"{format(o['instructions_per_element'], '.2f') if 'instructions_per_element' in o else '-':>5} "
                f"{o.get('elements_per_thread', '-'):>4}")
        if "error" in r and "worst_over_tol" not in r:
            lines.append(f"{head} | FAILED: {r['error'][:150]}")
            continue
        lines.append(f"{head} | {_verdict(r)} | {_cells(r, triton, keys)}"
                     + (f"  error: {r['error'][:100]}" if "error" in r else ""))
    bwd_rows = [r for r in rows if r["variant"].startswith("bwd:") or r["variant"] == "triton"]
    if len(bwd_rows) > 1:
        keys = ["bwd_B1_L8192_ms", "fwdbwd_B1_L8192_ms"]
        lines += ["", "Gluon backward variants after the Triton forward (bwd = fwd+bwd - fwd, B=1 L=8192; x = triton / "
                  "variant; check over two quick cases, the Gluon forward's default variant before it; CPT channels "
                  "per thread, NW warps per program: dk, dq summed over NW warps in the kernel before the atomics; "
                  "-probe- rows leave the named work out and are timed only)",
                  f"{'variant':34} {'CPT':>3} {'NW':>2} {'reg':>4} | {'check':>6} | "
                  + " | ".join(f"{k.removesuffix('_ms'):>18}" for k in keys)]
        for r in bwd_rows:
            m = r.get("mapping") or _mapping(r["variant"])
            o = offline.get(r["variant"], {})
            head = f"{r['variant']:34} {m.get('CPT', '-'):>3} {m.get('NW', '-'):>2} {o.get('registers', '-'):>4}"
            if "error" in r and "worst_over_tol" not in r and not r.get("probe"):
                lines.append(f"{head} | FAILED: {r['error'][:150]}")
                continue
            lines.append(f"{head} | {_verdict(r)} | {_cells(r, triton, keys)}"
                         + (f"  error: {r['error'][:100]}" if "error" in r else ""))
    return "\n".join(lines)


def winners(rows: list[dict]) -> dict:
    """The fastest passing forward variant for each timed forward shape, and the fastest passing backward (with
    whether it beats Triton's)."""
    result = {}
    forwards = [r for r in rows if r["variant"] != "triton" and not r["variant"].startswith("bwd:")]
    for kind, batch, length in TIMED:
        key = f"{kind}_B{batch}_L{length}_ms"
        timed = [r for r in forwards if r.get("passed") and key in r]
        if timed:
            best = min(timed, key=lambda r: r[key])
            result[key] = {"variant": best["variant"], "ms": best[key]}
    backwards = [r for r in rows if r["variant"].startswith("bwd:") and r.get("passed") and "bwd_B1_L8192_ms" in r]
    if backwards:
        best = min(backwards, key=lambda r: r["bwd_B1_L8192_ms"])
        triton = next((r for r in rows if r["variant"] == "triton" and "bwd_B1_L8192_ms" in r), None)
        result["bwd_B1_L8192_ms"] = {"variant": best["variant"].removeprefix("bwd:"), "ms": best["bwd_B1_L8192_ms"],
                                     "beats_triton": triton is not None
                                     and best["bwd_B1_L8192_ms"] < triton["bwd_B1_L8192_ms"]}
    return result


def summary(rows: list[dict], offline: dict, best: dict) -> str:
    text = table(rows, offline)
    text += "\n\nfastest passing: " + (", ".join(
        f"{k.removesuffix('_ms')} {w['variant']} ({w['ms']:.3f} ms"
        + (", beats Triton's)" if w.get("beats_triton") else ", slower than Triton's)" if "beats_triton" in w else ")")
        for k, w in best.items()) or "none")
    return text


def write_winners(out: str, best: dict) -> None:
    with open(os.path.join(out, "sweep-winner.txt"), "w") as f:
        for key in ("fwd_B1_L8192_ms", "fwd_B4_L8192_ms"):
            f.write(best.get(key, {}).get("variant", "") + "\n")
        bwd = best.get("bwd_B1_L8192_ms", {})
        f.write((bwd["variant"] if bwd.get("beats_triton") else "") + "\n")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2].split(","), sys.argv[3], sys.argv[4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output directory")
    parser.add_argument("--variants", help="comma-separated names (default: triton, every FWD_VARIANTS entry and "
                                           "every BWD_VARIANTS entry as bwd:<name>)")
    parser.add_argument("--variant-timeout", type=float, default=60.0, help="seconds per variant")
    parser.add_argument("--total-timeout", type=float, default=240.0, help="seconds for the whole sweep")
    parser.add_argument("--retable", action="store_true",
                        help="only rewrite sweep.txt from sweep.json with OUT/inspect.json's numbers (run after it)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.retable:
        with open(os.path.join(args.out, "sweep.json")) as f:
            data = json.load(f)
        data["offline"] = offline_numbers(args.out)
        with open(os.path.join(args.out, "sweep.txt"), "w") as f:
            f.write(summary(data["rows"], data["offline"], data["winners"]) + "\n")
        with open(os.path.join(args.out, "sweep.json"), "w") as f:
            json.dump(data, f, indent=1)
        return 0
    from palimpsa.kernels import gluon_scan

    names = args.variants.split(",") if args.variants else [
        "triton", *gluon_scan.FWD_VARIANTS, *(f"bwd:{name}" for name in gluon_scan.BWD_VARIANTS)]
    unknown = [n for n in names if n != "triton" and n not in gluon_scan.FWD_VARIANTS
               and n.removeprefix("bwd:") not in gluon_scan.BWD_VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(gluon_scan.FWD_VARIANTS)}")
    t0 = time.time()
    rows = drive(args.out, names, args.variant_timeout, args.total_timeout)
    offline = offline_numbers(args.out)
    best = winners(rows)
    text = summary(rows, offline, best) + f"\nsweep took {time.time() - t0:.0f} s"
    print(text)
    with open(os.path.join(args.out, "sweep.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"rows": rows, "winners": best, "offline": offline, "timed": TIMED}, f, indent=1)
    write_winners(args.out, best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
