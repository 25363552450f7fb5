"""Correctness of the GPU Palimpsa scan (Triton, or the Gluon forward) at real shapes, against float64 references.

Forward output, final states, uncertainty and every gradient (v, k, q, log_decay, beta, M0, I0) of a random
weighted loss over all four outputs are compared by relative RMS error with:

- the chunked PyTorch path in float64 (its backward through autograd, segment by segment under
  ``torch.utils.checkpoint`` so that 16k tokens fit), for every case;
- the sequential reference (naive) in float64 for the short case.

Inputs mix decays near 1 (``log_decay`` about -1e-4) and near 0 (about -9), with beta up to 10. Tolerances: 1e-5
for float32 inputs (no TF32: at PyTorch's default float32 precision the chunk-parallel forward's matrix products
run in tf32x3 and the backward's corrections in IEEE float32), 1e-2 for bfloat16 and float16 (whose products run in
TF32). The last three cases (``[cuda walk]``: float16, head dimensions 32 and 128; ``auto`` left the first two to
the Triton walk until they passed here on an H200) run the chunked forward with the CUDA chunk walk forced
(``PALIMPSA_CUDA_WALK=1``) under ``--without-uncertainty``, and with the Triton walk otherwise (the uncertainty
output keeps it). The three ``[cuda local]`` cases (packed sequences in bf16, a head dimension of 128, float32 inputs
with TF32 allowed, at bf16's tolerance) force the chunked forward's CUDA local pass (``PALIMPSA_CUDA_FWD_LOCAL=1``),
which ``auto`` takes there too since they passed on an H200 (docs/bench/fixcp-2026-11-29).
Prints a table and exits non-zero if any check fails. A case whose kernel fails to compile or run is reported as an
error row (with the message, also in the JSON) and the other cases still run.

    python scripts/check_scan_gpu.py [--backend triton|gluon|gluon-bwd] [--quick] [--json results.json]

``--without-uncertainty`` leaves the uncertainty output out (so no uncertainty gradient): the Gluon local pass of
the chunk-parallel backward (``LOCAL`` "auto", the default, takes it on Hopper; ``LOCAL=gluon`` asks for it) runs
only then, e.g. ``--backend triton-chunked --chunked-config NSPLIT=2 --without-uncertainty`` (``NSPLIT=2``: the
packed and one-chunk cases would otherwise fill the GPU unsplit and run the sequential backward). After the table,
each case's line says which local passes and corrections (``CORRECT``: CUDA or Triton) ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch
import triton
from palimpsa.kernels import chunked_bwd, chunked_fwd, cuda_fwd_local, cuda_walk, fused_recurrent, palimpsa_scan, scan
from torch.utils.checkpoint import checkpoint

HEADS, HEAD_DIM, STATE = 80, 64, 128
OUTPUTS = ("y", "M_T", "I_T", "u")
GRADS = ("v", "k", "q", "log_decay", "beta", "M0", "I0")


def make_inputs(batch, length, groups, dtype, *, with_beta=True, with_state=True, with_importance=True, n_states=None,
                seed=0, head_dim=HEAD_DIM):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, device="cuda", dtype=torch.float64)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float64)

    log_decay = -9 * rand(batch, length, HEADS)
    pick = rand(batch, length, HEADS)
    log_decay = torch.where(pick < 0.3, -1e-4 * (1 + 9 * rand(batch, length, HEADS)), log_decay)
    log_decay = torch.where(pick > 0.85, -8.0 - rand(batch, length, HEADS), log_decay)
    n_states = batch if n_states is None else n_states
    inputs = {
        "v": randn(batch, length, HEADS, head_dim) * 0.5,
        "k": randn(batch, length, groups, STATE),
        "q": randn(batch, length, groups, STATE),
        "log_decay": log_decay,
        "beta": 10 * rand(batch, length, HEADS, head_dim) if with_beta else None,
        "M0": randn(n_states, HEADS, head_dim, STATE) if with_state else None,
        "I0": 0.5 + rand(n_states, HEADS, head_dim, STATE) if with_state and with_importance else None,
    }
    return {n: None if t is None else t.to(torch.float32 if n in ("M0", "I0") else dtype)
            for n, t in inputs.items()}


def run_op(inputs, backend, prior, cu_seqlens=None, uncertainty=True):
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    y, final, u = palimpsa_scan(inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"],
                                importance_prior=prior, initial_state=state, output_final_state=True,
                                output_uncertainty=uncertainty, cu_seqlens=cu_seqlens, backend=backend)
    return [y, final[0], final[1], *([u] if uncertainty else [])]


def _segment(v, k, q, log_decay, beta, m, i, prior):
    y, (m, i), u = palimpsa_scan(v, k, q, log_decay, beta, importance_prior=prior, initial_state=(m, i),
                                 output_final_state=True, output_uncertainty=True, backend="torch")
    return y, m, i, u


def run_checkpointed_torch(inputs, prior, cu_seqlens=None, segment=64):
    """The chunked PyTorch path, one sequence and one segment at a time, each segment recomputed in backward."""
    batch, length = inputs["v"].shape[:2]
    bounds = [0, length] if cu_seqlens is None else cu_seqlens.tolist()
    ys, us, ms, is_ = [], [], [], []
    for index, (start, end) in enumerate(zip(bounds, bounds[1:])):
        rows = slice(None) if cu_seqlens is None else slice(index, index + 1)
        if inputs["M0"] is None:
            n = batch if cu_seqlens is None else 1
            m = inputs["v"].new_zeros(n, HEADS, inputs["v"].shape[-1], STATE)
            i = torch.full_like(m, prior)
        else:
            m = inputs["M0"][rows]
            i = torch.full_like(m, prior) if inputs["I0"] is None else inputs["I0"][rows]
        y_parts, u_parts = [], []
        for s in range(start, end, segment):
            part = slice(s, min(s + segment, end))
            beta = None if inputs["beta"] is None else inputs["beta"][:, part]
            y, m, i, u = checkpoint(_segment, inputs["v"][:, part], inputs["k"][:, part], inputs["q"][:, part],
                                    inputs["log_decay"][:, part], beta, m, i, prior, use_reentrant=False)
            y_parts.append(y)
            u_parts.append(u)
        ys.append(torch.cat(y_parts, 1))
        us.append(torch.cat(u_parts, 1))
        ms.append(m)
        is_.append(i)
    return [torch.cat(ys, 1), torch.cat(ms), torch.cat(is_), torch.cat(us, 1)]


def outputs_and_grads(inputs, runner, weights):
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in inputs.items() if t is not None}
    full = {n: leaves.get(n) for n in inputs}
    outputs = runner(full)
    loss = sum((o.double() * w).sum() for o, w in zip(outputs, weights, strict=True))
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return [o.detach() for o in outputs], dict(zip(leaves, grads, strict=True))


def relative_error(got, want):
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    scale = max(want.norm().item(), 1e-3 * want.numel() ** 0.5)
    return (got - want).norm().item() / scale


def check_case(name, inputs, tol, prior, cu_seqlens=None, with_naive=False, backend="triton", uncertainty=True):
    """Rows ``(case, quantity, reference, error, tol, ok)`` for one set of inputs; without ``uncertainty`` the
    uncertainty output is not asked for (nor checked)."""
    n_out = len(OUTPUTS) if uncertainty else len(OUTPUTS) - 1
    gen = torch.Generator(device="cuda").manual_seed(7)
    weights = [torch.randn(s, generator=gen, device="cuda", dtype=torch.float64)
               for s in shapes_of(inputs, cu_seqlens)[:n_out]]
    t0 = time.time()
    got, got_grads = outputs_and_grads(inputs, lambda x: run_op(x, backend, prior, cu_seqlens, uncertainty), weights)
    t_kernel = time.time() - t0
    exact = {n: None if t is None else t.double() for n, t in inputs.items()}
    references = {"torch-f64": lambda x: run_checkpointed_torch(x, prior, cu_seqlens)[:n_out]}
    if with_naive:
        references["naive-f64"] = lambda x: run_op(x, "naive", prior, cu_seqlens, uncertainty)
    rows = []
    for ref_name, runner in references.items():
        t0 = time.time()
        want, want_grads = outputs_and_grads(exact, runner, weights)
        t_ref = time.time() - t0
        for label, g, w in zip(OUTPUTS[:n_out], got, want, strict=True):
            err = relative_error(g, w)
            rows.append((name, label, ref_name, err, tol, err <= tol))
        for label in GRADS:
            if label in want_grads:
                err = relative_error(got_grads[label], want_grads[label])
                rows.append((name, "d" + label, ref_name, err, tol, err <= tol))
        print(f"  {name}: {backend} fwd+bwd {t_kernel:.1f} s (incl. compile), {ref_name} {t_ref:.1f} s", flush=True)
        del want, want_grads
        torch.cuda.empty_cache()
    return rows


def shapes_of(inputs, cu_seqlens):
    n_states = inputs["v"].shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
    state = (n_states, HEADS, inputs["v"].shape[-1], STATE)
    return [inputs["v"].shape, state, state, inputs["v"].shape]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter sequences (4096 instead of 16384)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--backend", default="triton", choices=("triton", "gluon", "gluon-bwd", "triton-chunked",
                                                                 "triton-sequential"),
                        help="the path to check: the Triton kernels, the Gluon forward with the Triton backward, or "
                             "the Gluon forward and backward (PALIMPSA_GLUON_BACKWARD=1); triton: the Triton path as "
                             "dispatched (the chunk-parallel backward for bf16 inputs; for float32 at full precision "
                             "no split: the Gluon pass's whole walks where it runs, else the sequential kernel), "
                             "triton-chunked / triton-sequential: that backward everywhere")
    parser.add_argument("--forward", choices=fused_recurrent.FORWARDS, default=None,
                        help="the Triton forward (PALIMPSA_TRITON_FORWARD): auto (chunk-parallel where the GPU would "
                             "otherwise be short of programs), sequential, or chunked everywhere")
    parser.add_argument("--chunked-config", default="", metavar="KEY=VALUE:...",
                        help="overrides of chunked_bwd.CHUNKED_CONFIG for the chunk-parallel backward, e.g. GROUP=4")
    parser.add_argument("--forward-config", default="", metavar="KEY=VALUE:...",
                        help="overrides of chunked_fwd.CHUNKED_FWD_CONFIG for the chunk-parallel forward, e.g. "
                             "DOT=tf32x3 (with --forward chunked, or where auto takes it)")
    parser.add_argument("--without-uncertainty", action="store_true",
                        help="leave the uncertainty output out (so no uncertainty gradient): the Gluon local pass "
                             "(by default on Hopper; --chunked-config LOCAL=gluon asks for it) runs only then")
    args = parser.parse_args()
    backend = args.backend
    if args.chunked_config:
        from bench_scan import config_keys  # this script's folder

        chunked_bwd.CHUNKED_CONFIG.update(config_keys(args.chunked_config))
    if args.forward_config:
        from bench_scan import config_keys  # this script's folder

        chunked_fwd.CHUNKED_FWD_CONFIG.update(config_keys(args.forward_config))
    if args.forward:
        os.environ[fused_recurrent.FORWARD_ENV] = args.forward
    if backend in ("triton-chunked", "triton-sequential"):  # the Triton forward with that backward everywhere
        os.environ[fused_recurrent.BACKWARD_ENV] = backend.removeprefix("triton-")
        backend = "triton"
    if backend == "gluon-bwd":
        os.environ[scan.GLUON_BACKWARD_ENV] = "1"
        backend = "gluon"
    long = 4096 if args.quick else 16384
    fused_recurrent.POISON_OUTPUTS = True  # every output starts NaN: an unwritten element fails the check
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    cases = [
        ("B2 L128 G2 f32 beta state (+naive)", make_inputs(2, 128, 2, f32, seed=1), 1e-5, 0.7, None, True),
        (f"B1 L{long} G1 f32 beta state", make_inputs(1, long, 1, f32, seed=2), 1e-5, 1.0, None, False),
        (f"B1 L{long} G1 bf16 beta", make_inputs(1, long, 1, bf16, with_state=False, seed=3), 1e-2, 1.0, None,
         False),
        ("B2 L4096 G2 bf16 beta state", make_inputs(2, 4096, 2, bf16, seed=4), 1e-2, 0.7, None, False),
        ("B2 L1 G2 f32 beta state: one token (+naive)", make_inputs(2, 1, 2, f32, seed=7), 1e-5, 0.7, None, True),
        ("B2 L2048 G1 f32 no-beta, state (M0, None)",
         make_inputs(2, 2048, 1, f32, with_beta=False, with_importance=False, seed=5), 1e-5, 1.0, None, False),
    ]
    bounds = [0, 1000, 1001, 3003, 4096]
    cases.append(("varlen 1000/1/2002/1093 G2 f32 beta state",
                  make_inputs(1, 4096, 2, f32, n_states=len(bounds) - 1, seed=6), 1e-5, 0.7,
                  torch.tensor(bounds, dtype=torch.int32, device="cuda"), False))
    # the CUDA chunk walk's other dtype and head dimensions (fp16, P = 32 and 128): the chunked forward and the CUDA
    # walk forced (without the uncertainty output, which keeps the Triton walk)
    forced = {fused_recurrent.FORWARD_ENV: "chunked", cuda_walk.ENV: "1" if args.without_uncertainty else "auto"}
    for name, inputs in (
        ("B1 L4096 G1 fp16 beta state [cuda walk]", make_inputs(1, 4096, 1, f16, seed=8)),
        ("B1 L4096 G2 bf16 P32 beta state [cuda walk]", make_inputs(1, 4096, 2, bf16, seed=9, head_dim=32)),
        ("B1 L4096 G1 f32 P128 beta state [cuda walk]", make_inputs(1, 4096, 1, f32, seed=10, head_dim=128)),
    ):
        cases.append((name, inputs, 1e-5 if inputs["v"].dtype == f32 else 1e-2, 0.7, None, False, forced))
    # the forward's CUDA local pass on packed sequences, two blocks of channels and float32 keys: forced, so that these
    # cases check it whatever auto would choose; float32 with TF32 allowed ("precision", this case's float32 matmul
    # precision)
    local = {fused_recurrent.FORWARD_ENV: "chunked", cuda_fwd_local.ENV: "1"}
    cases += [
        ("varlen 1000/1/2002/1093 G2 bf16 beta state [cuda local]",
         make_inputs(1, 4096, 2, bf16, n_states=len(bounds) - 1, seed=11), 1e-2, 0.7,
         torch.tensor(bounds, dtype=torch.int32, device="cuda"), False, local),
        ("B1 L4096 G1 bf16 P128 beta state [cuda local]", make_inputs(1, 4096, 1, bf16, seed=12, head_dim=128), 1e-2,
         0.7, None, False, local),
        ("B1 L4096 G1 f32 TF32 beta state [cuda local]", make_inputs(1, 4096, 1, f32, seed=13), 1e-2, 0.7, None,
         False, {**local, "precision": "high"}),
    ]
    rows, errors, local_runs, walk_runs = [], {}, {}, {}
    for name, inputs, tol, prior, cu_seqlens, with_naive, *forcing in cases:
        before, corrections_before = dict(chunked_bwd.LOCAL_RUNS), dict(chunked_bwd.CORRECT_RUNS)
        walks_before, fwd_locals_before = dict(chunked_fwd.WALK_RUNS), dict(chunked_fwd.LOCAL_RUNS)
        env = dict(forcing[0]) if forcing else {}  # the case's environment, restored after it
        precision = env.pop("precision", None)  # and its float32 matmul precision
        saved = {key: os.environ.get(key) for key in env}
        saved_precision = torch.get_float32_matmul_precision()
        os.environ.update(env)
        if precision:
            torch.set_float32_matmul_precision(precision)
        try:
            rows += check_case(name, inputs, tol, prior, cu_seqlens, with_naive, backend, not args.without_uncertainty)
        except Exception as error:  # noqa: BLE001 - report a failing kernel and go on with the other cases
            traceback.print_exc()
            errors[name] = f"{type(error).__name__}: {error}"
            rows.append((name, "error", args.backend, float("inf"), tol, False))
        finally:
            torch.set_float32_matmul_precision(saved_precision)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        local_runs[name] = chunked_bwd.local_runs_since(before)
        local_runs[name].update({f"{k} corrections": n - corrections_before[k]
                                 for k, n in chunked_bwd.CORRECT_RUNS.items() if n > corrections_before[k]})
        walk_runs[name] = {f"{k} local": n - fwd_locals_before[k] for k, n in chunked_fwd.LOCAL_RUNS.items()
                           if n > fwd_locals_before[k]}
        walk_runs[name].update({k: n - walks_before[k] for k, n in chunked_fwd.WALK_RUNS.items()
                                if n > walks_before[k]})
        torch.cuda.empty_cache()
    forward_dot = chunked_fwd._sizes(chunked_fwd.CHUNKED_FWD_CONFIG, f32, 64, 128, 512, True)["DOT"]
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, backend "
          f"{args.backend}, forward {os.environ.get(fused_recurrent.FORWARD_ENV) or 'auto'}, chunked "
          f"{args.chunked_config or 'default'}, chunked forward {args.forward_config or 'default'}"
          f"{', without uncertainty' if args.without_uncertainty else ''}; float32 cases without TF32 (the chunked "
          f"forward's products in {forward_dot}, the backward's corrections in "
          f"{chunked_bwd._dot_precision(chunked_bwd.CHUNKED_CONFIG['DOT'], f32)})")
    print(f"{'case':44s} {'quantity':11s} {'reference':10s} {'rel err':>10s} {'tol':>7s}  ok")
    for case, label, ref, err, tol, ok in rows:
        print(f"{case:44s} {label:11s} {ref:10s} {err:10.2e} {tol:7.0e}  {'yes' if ok else 'NO'}")
    print("\nthe chunk-parallel forward's local passes and chunk walks, per case (none: the sequential forward ran):")
    for name, runs in walk_runs.items():
        print(f"  {name:44s} {', '.join(f'{k} {n}' for k, n in runs.items()) or 'none'}")
    print("\nthe chunk-parallel backward's local passes and corrections, per case (none: the sequential backward "
          "ran):")
    for name, runs in local_runs.items():
        print(f"  {name:44s} {', '.join(f'{k} {n}' for k, n in runs.items()) or 'none'}")
    failed = [r for r in rows if not r[5]]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} checks passed")
    for name, message in errors.items():
        print(f"ERROR in {name}: {message}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "backend": args.backend,
                       "uncertainty": not args.without_uncertainty,
                       "forward": os.environ.get(fused_recurrent.FORWARD_ENV) or "auto", "errors": errors,
                       "local_passes": local_runs,
                       "rows": [dict(zip(("case", "quantity", "reference", "error", "tol", "ok"), r)) for r in rows]},
                      f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
