"""Fine-tuning with each local pass, interleaved in one process: bench_train.py's models (2.7b shapes, L = 8192,
bf16, TF32, activation checkpointing; ``--upgraded`` layers trained), the plain model and the upgraded one built
once, then ``--rounds`` rounds that each time ``--steps`` optimizer steps of the plain model and of the upgraded
model with the Triton local pass and with the Gluon one (``CHUNKED_CONFIG`` "LOCAL" "triton", then "auto" with
``--l2pf``), in an order that turns each round. Separate processes (bench_train.py, one per pass) put the host's
speed between the arms: a profiled step's idle time varied from 105 to 351 ms between two processes with the same
kernels (call 6), more than the 8 ms a step the local passes differ by. Prints each step's time, then per arm the
median and the tokens/s ratio to the plain model, and the Gluon arm against the Triton arm per round. Run from the
repository root: ``python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded 8``.

``--arm NAME=KEY=VAL:KEY=VAL`` (repeatable; added for call 14) replaces the Triton and Gluon arms with upgraded-model
arms of those ``CHUNKED_CONFIG`` settings (``NAME=`` alone: the shipped config), each also reporting its peak
memory; the per-round line then compares every arm with the first. ``--documents N`` (added by
docs/bench/whole-2026-11-28) packs N documents of equal length into the row with ``cu_seqlens``, as the trainer
packs its data (bench_train.py's ``packed``; 1, the default, is one document); ``--full-precision`` (also added
there) runs float32 matrix products at full precision, the trainer's default, instead of TF32. An arm's ``FORWARD``
key (added by docs/bench/tf32x3-2026-11-28) sets ``PALIMPSA_TRITON_FORWARD`` (auto, sequential, chunked) for its
steps, so that forwards can be compared too."""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
from bench_train import build, packed, prepare  # noqa: E402
from palimpsa.kernels import chunked_bwd, fused_recurrent  # noqa: E402
from palimpsa.upgrade import PalimpsaConfig  # noqa: E402
from palimpsa.upgrade.convert.surgery import spread_layers  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgraded", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--l2pf", type=int, default=chunked_bwd.CHUNKED_CONFIG["L2PF"])
    parser.add_argument("--arm", action="append", default=[], metavar="NAME=KEY=VAL:KEY=VAL")
    parser.add_argument("--documents", type=int, default=1)
    parser.add_argument("--full-precision", action="store_true",
                        help="float32 matrix products at full precision (the trainer's default) instead of TF32")
    args = parser.parse_args()
    torch.set_float32_matmul_precision("highest" if args.full_precision else "high")
    layers = spread_layers(args.upgraded, 64)
    shape = dict(d_model=2560, n_layer=64, vocab_size=50288, beta_init=1e-3)
    plain = build(PalimpsaConfig(**shape, upgraded_layers=[]), "cuda", torch.bfloat16)
    upgraded = build(PalimpsaConfig(**shape, upgraded_layers=layers), "cuda", torch.bfloat16)
    optimizers = {id(plain): prepare(plain, layers), id(upgraded): prepare(upgraded, layers)}
    ids = torch.randint(0, 50288, (1, args.seq_len), device="cuda")
    cu_seqlens = packed(args.seq_len, args.documents)
    shipped = dict(chunked_bwd.CHUNKED_CONFIG)
    arms = {"plain": (plain, {}), "triton": (upgraded, {"LOCAL": "triton"}),
            "gluon": (upgraded, {"LOCAL": "auto", "L2PF": args.l2pf})}
    if args.arm:
        arms = {"plain": (plain, {})}
        for spec in args.arm:
            name, _, settings = spec.partition("=")
            pairs = (item.split("=", 1) for item in settings.split(":") if item)
            arms[name] = (upgraded, {k: (v if k in ("LOCAL", "FORWARD") else int(v)) for k, v in pairs})

    def step(model):
        optimizer = optimizers[id(model)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        model(ids, labels=ids, cu_seqlens=cu_seqlens).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    user_forward = os.environ.get(fused_recurrent.FORWARD_ENV)
    times = {arm: [] for arm in arms}
    peaks = {arm: 0 for arm in arms}
    runs = {}
    names = list(arms)
    for round_ in range(args.rounds + 1):  # round 0 warms every arm up and is not counted
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for arm in order:
            model, config = arms[arm]
            forward = config.get("FORWARD")
            config = {k: v for k, v in config.items() if k != "FORWARD"}
            if forward or user_forward:  # an arm without FORWARD keeps what the environment had
                os.environ[fused_recurrent.FORWARD_ENV] = forward or user_forward
            else:
                os.environ.pop(fused_recurrent.FORWARD_ENV, None)
            chunked_bwd.CHUNKED_CONFIG.clear()
            chunked_bwd.CHUNKED_CONFIG.update(shipped, **config)
            before = dict(chunked_bwd.LOCAL_RUNS)
            torch.cuda.reset_peak_memory_stats()
            ms = [step(model) for _ in range(args.steps if round_ else 2)]
            peaks[arm] = max(peaks[arm], torch.cuda.max_memory_allocated())
            ran = {k: n - before.get(k, 0) for k, n in chunked_bwd.LOCAL_RUNS.items() if n > before.get(k, 0)}
            runs.setdefault(arm, {}).update(ran)
            if round_:
                times[arm].append(ms)
            print(f"round {round_} {arm:6s} {' '.join(f'{t:7.1f}' for t in ms)} ms  local passes {ran}", flush=True)
    chunked_bwd.CHUNKED_CONFIG.clear()
    chunked_bwd.CHUNKED_CONFIG.update(shipped)
    tokens = args.seq_len
    med = {arm: statistics.median(t for r in times[arm] for t in r) for arm in arms}
    arms_note = f"arms {', '.join(args.arm)}" if args.arm else f"L2PF {args.l2pf} in the gluon arm"
    print(f"\n{args.upgraded} of 64 layers upgraded, L = {args.seq_len} ({args.documents} documents, float32 products "
          f"{torch.get_float32_matmul_precision()}), {args.rounds} "
          f"rounds of {args.steps} steps "
          f"({arms_note}), {torch.cuda.get_device_name()}")
    for arm in arms:
        print(f"  {arm:6s} median step {med[arm]:7.1f} ms  {tokens / med[arm] * 1e3:8,.0f} tok/s  "
              f"ratio to plain {med['plain'] / med[arm]:.3f}  peak {peaks[arm] / 2**30:.2f} GiB  "
              f"local passes {runs.get(arm, {})}")
    first, *others = [arm for arm in arms if arm != "plain"]
    for other in others:
        per_round = [statistics.median(o) / statistics.median(f) for o, f in zip(times[other], times[first])]
        print(f"  {other} / {first} step time per round: " + " ".join(f"{r:.3f}" for r in per_round))


if __name__ == "__main__":
    main()
