"""Fine-tuning throughput and memory: an upgraded model against the same model with no layer upgraded.

Side by side in one run, on one GPU: mamba2-2.7b dimensions (random weights), the same layers trained in both
models (every parameter of their mixers: Mamba2 weights, plus beta in the upgraded model), activation
checkpointing per block as the trainer sets it up (blocks with a Palimpsa layer keep the scan's outputs;
``--full-recompute`` also times them recomputing it), bf16, AdamW, the objects made before the timed steps frozen out
of Python's garbage collector as the trainer's loop has them. Reports tokens/s and peak memory per
sequence length, and the ratios. Targets (docs/kernels.md): with 8 of 64 layers upgraded >= 0.92x the plain
model's tokens/s and <= 1.2x its peak memory; with all 64 >= 0.70x and <= 1.6x. Both models use the same Mamba2
path for their plain layers; the Palimpsa layers use palimpsa_scan's "auto" backend (Triton on CUDA), or the one
that PALIMPSA_SCAN_BACKEND names. The layers feed the scan float32 inputs, so PALIMPSA_TRITON_BACKWARD's default
(auto) takes the chunk-parallel backward under ``--tf32`` and without it the Gluon local pass walking whole
sequences (the sequential kernel where that pass cannot run).
PALIMPSA_GLUON_LOCAL_PROGRAMS=12 runs that backward's Gluon local pass as 12 programs an SM (opt-in: faster, more
scratch; docs/kernels.md).

    python scripts/bench_train.py --json bench_train.json
    PALIMPSA_GLUON_LOCAL_PROGRAMS=12 python scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32
    python scripts/bench_train.py --d-model 768 --n-layer 24 --upgraded 4 --seq-lens 2048   # a quick look
    python scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 4   # a ratio robust to drift
    python scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --profile 25   # where a step's time goes
    python scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --documents 4   # packed, as the trainer packs

``--documents N`` packs N documents of equal length into each row, with ``cu_seqlens`` marking them, as the trainer
packs its data by default (every model starts a fresh state at each); 1 (the default) is one document a row.

``--rounds R`` builds and times each model R times, alternating the order (plain, upgraded, upgraded, plain, ...),
and reports the median of the R ratios, each from two runs next to each other in time: a lent GPU's speed can move by
a few percent between runs, more than one kernel change is worth. While each model's timed steps run, a thread reads
the GPU's SM clock, power draw, temperature and clock-event reasons from ``nvidia-smi`` (where it is on the PATH)
every second; each round prints the lowest clock, the highest power and temperature and the reasons that lowered the
clock (power cap, thermal, ...), and the JSON keeps them (``gpu_state``), so that a slow round shows whether the GPU
throttled. Each round also prints each model's fastest and slowest timed step, and the JSON keeps every step's time
(``steps_s``), so that a slow round shows whether all its steps were slow or one was.

``--profile N`` runs one more step of each model under torch.profiler after its timed steps and prints the N GPU
kernels that took the most time in it (ms per step, calls, share of the step's kernel time), and the sums over the
scan's kernels (``palimpsa_*``), mamba_ssm's SSD kernels, matrix products and the rest; the summary then also gives
the ratio of the two models' summed kernel times a step (``kernel_time_ratio``): the tokens/s ratio on a host that
never leaves the GPU idle. Where the host sets the pace (with the block's elementwise work fused, a plain block's
backward takes about as long to launch as to run), the tokens/s ratio depends on the host's speed and flatters the
upgraded model, whose scan keeps the GPU busy while the host launches the next kernels.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import operator
import os
import subprocess
import threading
import time

import torch
from palimpsa.kernels import fused_recurrent
from palimpsa.kernels.scan import BACKEND_ENV, GLUON_BACKWARD_ENV
from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM
from palimpsa.upgrade.convert.surgery import spread_layers
from palimpsa.upgrade.model.modeling import enable_activation_checkpointing


def build(config: PalimpsaConfig, device: str, dtype: torch.dtype) -> PalimpsaForCausalLM:
    torch.manual_seed(0)
    with torch.device("meta"):
        model = PalimpsaForCausalLM(config)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("A_log",)):
                param.copy_(torch.empty_like(param).uniform_(1, 16).log())
            elif name.endswith("dt_bias"):
                dt = torch.empty_like(param).uniform_(-6.9, -2.3).exp()
                param.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith(("norm.weight", "D")):
                param.fill_(1.0)
            elif name.endswith("beta_log_gain"):
                param.fill_(math.log(config.beta_init))
            elif name.endswith(("beta_up.weight", "beta_up.bias", "conv1d.bias")):
                param.zero_()
            else:
                param.normal_(std=param.shape[-1] ** -0.5 if param.dim() > 1 else 0.02)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.backbone.embedding.weight
    return model.to(dtype).train()


def prepare(model: PalimpsaForCausalLM, layers: list[int], keep_scan_outputs: bool = True) -> torch.optim.Optimizer:
    """Train only the mixers of ``layers`` (every other parameter frozen), with activation checkpointing as the
    trainer sets it up: their AdamW optimizer."""
    for param in model.parameters():
        param.requires_grad_(False)
    trained = [p for i in layers for p in model.backbone.layers[i].mixer.parameters()]
    for param in trained:
        param.requires_grad_(True)
    enable_activation_checkpointing(model, keep_scan_outputs=keep_scan_outputs)
    return torch.optim.AdamW(trained, lr=1e-5)


def packed(seq_len: int, documents: int, device: str = "cuda") -> torch.Tensor | None:
    """``cu_seqlens`` of one row of ``seq_len`` tokens holding ``documents`` documents of equal length (the last
    takes the remainder); None for one document."""
    if documents <= 1:
        return None
    bounds = [seq_len * i // documents for i in range(documents)] + [seq_len]
    return torch.tensor(bounds, dtype=torch.int32, device=device)


GPU_STATE_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")
GPU_STATE_KEYS = ("sm_clock_mhz", "power_w", "temperature_c", "clock_reasons")
# clocks_event_reasons bits that lower the SM clock under load (nvidia-smi --help-query-gpu)
CLOCK_REASONS = {0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal", 0x80: "power brake"}


def gpu_state(device: int | str = 0, run=subprocess.run) -> dict | None:
    """The GPU's SM clock (MHz), power draw (W), temperature (C) and active clock-event reasons (a bit mask) now, as
    ``nvidia-smi`` reads them for ``device`` (its index or UUID, ``GPU-...``); a reading the GPU does not give
    (``[N/A]``) is None, and an nvidia-smi without the reasons' field is asked without it. None where nvidia-smi is
    missing, fails or prints no such line (the benchmark goes on without it)."""
    for fields in (GPU_STATE_FIELDS, GPU_STATE_FIELDS[:3]):
        try:
            out = run(["nvidia-smi", f"--id={device}", f"--query-gpu={','.join(fields)}",
                       "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
        values = [field.strip() for field in lines[0].split(",")] if lines else []
        if len(values) == len(fields):
            break
    else:
        return None
    state = {}
    for key, value in zip(GPU_STATE_KEYS, values):
        try:
            state[key] = int(value, 16) if key == "clock_reasons" else float(value)
        except ValueError:  # "[N/A]", "[Not Supported]"
            state[key] = None
    return state if any(value is not None for value in state.values()) else None


def combine_states(states: list) -> dict | None:
    """Readings taken over a run as one: the lowest SM clock, the highest power and temperature, every clock-event
    reason seen, and how many readings there were (None without any)."""
    states = [state for state in states if state]
    if not states:
        return None

    def pick(key, choose):
        values = [state.get(key) for state in states if state.get(key) is not None]
        return choose(values) if values else None

    return {"sm_clock_mhz": pick("sm_clock_mhz", min), "power_w": pick("power_w", max),
            "temperature_c": pick("temperature_c", max),
            "clock_reasons": pick("clock_reasons", lambda masks: functools.reduce(operator.or_, masks)),
            "readings": len(states)}


class GpuSampler:
    """``gpu_state`` read every ``every`` seconds in a thread between ``start()`` and ``stop()`` (nvidia-smi runs
    beside the steps, which it leaves to the GPU), once at ``stop()`` where the run was shorter than that; ``stop()``
    returns the readings as one (``combine_states``)."""

    def __init__(self, device: int | str, every: float = 1.0, read=gpu_state):
        self.device, self.every, self.read = device, every, read
        self.readings: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.readings.append(self.read(self.device))

    def start(self) -> GpuSampler:
        self._thread.start()
        return self

    def stop(self) -> dict | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if not self.readings:
            self.readings.append(self.read(self.device))
        return combine_states(self.readings)


def smi_device() -> str:
    """The current CUDA device as nvidia-smi names it: its UUID where torch gives one (so that
    ``CUDA_VISIBLE_DEVICES`` cannot mismatch the indices), else its index."""
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else str(index)


def state_text(state: dict | None) -> str:
    """Readings as ``1,755 MHz 689 W 68 C, power cap`` (the lowest clock, highest power and temperature, the reasons
    that lowered the clock); ``no GPU state`` without any."""
    if not state:
        return "no GPU state"

    def reading(key, text):
        return text.format(state[key]) if state.get(key) is not None else "?"

    text = " ".join([reading("sm_clock_mhz", "{:,.0f} MHz"), reading("power_w", "{:.0f} W"),
                     reading("temperature_c", "{:.0f} C")])
    reasons = [name for bit, name in CLOCK_REASONS.items() if (state.get("clock_reasons") or 0) & bit]
    return text + (", " + " + ".join(reasons) if reasons else "")


def steps_text(steps: list | None) -> str:
    """A model's timed steps in a round as their fastest and slowest, in seconds."""
    return f"{min(steps):.3f}-{max(steps):.3f} s" if steps else "?"


def measure(model: PalimpsaForCausalLM, layers: list[int], seq_len: int, steps: int, warmup: int,
            keep_scan_outputs: bool = True, profile_top: int = 0, documents: int = 1) -> dict:
    optimizer = prepare(model, layers, keep_scan_outputs)
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), device="cuda")
    cu_seqlens = packed(seq_len, documents)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    sampler = GpuSampler(smi_device())
    gc.collect()  # the objects made so far frozen out of the garbage collector, as the trainer's loop has them
    gc.freeze()
    try:
        for index in range(warmup + steps):
            if index == warmup:
                sampler.start()  # (the timed steps' readings)
            start = time.perf_counter()
            loss = model(ids, labels=ids, cu_seqlens=cu_seqlens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if index >= warmup:
                times.append(time.perf_counter() - start)
    finally:
        gc.unfreeze()
        state = sampler.stop()
    median = sorted(times)[len(times) // 2]
    result = {"seq_len": seq_len, "step_s": median, "tokens_per_s": seq_len / median, "steps_s": times,
              "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
              "peak_extra_gib": (torch.cuda.max_memory_allocated() - base) / 2**30, "loss": loss.item(),
              "gpu_state": state}
    if profile_top:
        result["profile"] = profile_step(model, ids, optimizer, profile_top, cu_seqlens)
    return result


def round_order(arms: list, index: int) -> list:
    """The arms in round ``index``: as given in even rounds, the first two swapped in odd ones (plain, upgraded,
    upgraded, plain, ...), so that a machine whose speed drifts over the run favours neither model."""
    if index % 2 == 0 or len(arms) < 2:
        return list(arms)
    return [arms[1], arms[0], *arms[2:]]


def combine_rounds(rounds: list[dict], labels: list[str]) -> dict:
    """One sequence length's result from its rounds (each ``{label: measure(...)}``): each model's median step over
    the rounds, its highest peak memory, and the throughput ratio as the median of the rounds' own ratios (each from
    two runs next to each other in time); ``ratios`` lists those, and each model's ``round_tokens_per_s`` and
    ``round_gpu_states`` its rounds' speeds and GPU readings."""
    result: dict = {}
    for label in labels:
        runs = [r[label] for r in rounds if label in r]
        if any("error" in run for run in runs):
            result[label] = next(run for run in runs if "error" in run)
            continue
        steps = sorted(run["step_s"] for run in runs)
        middle = next(run for run in runs if run["step_s"] == steps[(len(steps) - 1) // 2])
        result[label] = {**middle, "peak_gib": max(run["peak_gib"] for run in runs),
                         "peak_extra_gib": max(run["peak_extra_gib"] for run in runs),
                         "round_tokens_per_s": [run["tokens_per_s"] for run in runs],
                         "round_gpu_states": [run.get("gpu_state") for run in runs],
                         "round_steps_s": [run.get("steps_s") for run in runs]}

    def ratios(label: str) -> list[float]:
        return [r[label]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in rounds
                if "tokens_per_s" in r.get(label, {}) and "tokens_per_s" in r.get("plain", {})]

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    if "error" not in result["plain"] and "error" not in result["upgraded"]:
        result["ratios"] = ratios("upgraded")
        result["throughput_ratio"] = median(result["ratios"])
        result["memory_ratio"] = result["upgraded"]["peak_gib"] / result["plain"]["peak_gib"]
        fastest = {label: min((step for steps in result[label]["round_steps_s"] for step in steps or ()),
                              default=None) for label in ("plain", "upgraded")}
        if None not in fastest.values():
            # each model's fastest step over every round: the ratio with the fewest host stalls
            result["fastest_steps_s"] = fastest
            result["fastest_step_ratio"] = fastest["plain"] / fastest["upgraded"]
        kernel_ms = {label: next((r[label]["profile"]["kernel_ms"] for r in rounds if "profile" in r.get(label, {})),
                                 None) for label in ("plain", "upgraded")}
        if None not in kernel_ms.values() and kernel_ms["upgraded"] > 0:
            # the profiled step's summed GPU kernel time: the ratio were the host never to leave the GPU idle
            result["kernel_ms"] = kernel_ms
            result["kernel_time_ratio"] = kernel_ms["plain"] / kernel_ms["upgraded"]
    full = result.get("upgraded_full_recompute", {})
    if "error" not in result["plain"] and "tokens_per_s" in full:
        result["full_recompute_throughput_ratio"] = median(ratios("upgraded_full_recompute"))
        result["full_recompute_memory_ratio"] = full["peak_gib"] / result["plain"]["peak_gib"]
    return result


def kernel_family(name: str) -> str:
    """A GPU kernel's family, for the profile's sums."""
    lowered = name.lower()
    if "palimpsa" in lowered:
        return "palimpsa scan"
    if lowered.startswith("_chunk_") or lowered.startswith("_bmm_chunk") or "_state_passing" in lowered:
        return "mamba_ssm SSD"
    if any(key in lowered for key in ("gemm", "sm90_xmma", "cutlass", "ampere_", "sm80_", "nvjet")):
        return "matrix products"
    if lowered.startswith(("gains_", "readout_", "conv_fwd_kernel", "conv_bwd_kernel", "add_norm_")):
        return "fused elementwise"  # palimpsa.kernels' values and gains, readout, convolution, block norm
    return "other"


def profile_step(model: PalimpsaForCausalLM, ids: torch.Tensor, optimizer, top: int,
                 cu_seqlens: torch.Tensor | None = None) -> dict:
    """One training step under torch.profiler: the ``top`` GPU kernels by total time and the families' sums, in ms
    per step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        loss = model(ids, labels=ids, cu_seqlens=cu_seqlens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    kernels = [event for event in prof.key_averages() if event.device_type == DeviceType.CUDA]
    total_us = sum(event.self_device_time_total for event in kernels)
    families: dict[str, float] = {}
    for event in kernels:
        family = kernel_family(event.key)
        families[family] = families.get(family, 0.0) + event.self_device_time_total / 1e3
    rows = sorted(kernels, key=lambda event: -event.self_device_time_total)[:top]
    return {"kernel_ms": total_us / 1e3, "families_ms": families,
            "top": [{"kernel": event.key, "ms": event.self_device_time_total / 1e3, "calls": event.count,
                     "share": event.self_device_time_total / max(total_us, 1e-9)} for event in rows]}


def print_profile(label: str, seq_len: int, found: dict) -> None:
    print(f"\nprofile of one step, {label} model, L = {seq_len}: {found['kernel_ms']:.1f} ms of GPU kernels")
    print("  " + ", ".join(f"{family} {ms:.1f} ms" for family, ms in sorted(found["families_ms"].items(),
                                                                            key=lambda item: -item[1])))
    for row in found["top"]:
        print(f"  {row['ms']:8.2f} ms {row['calls']:5d} calls {100 * row['share']:5.1f}%  {row['kernel'][:100]}")


def check_fused_mamba2() -> str:
    """Plain Mamba2 layers run mamba_ssm's fused scan when importable: check it against palimpsa_scan's path."""
    from palimpsa.upgrade.model import modeling

    if modeling.mamba_ssm_chunk_scan() is None:
        return "mamba_ssm not importable: plain Mamba2 layers use palimpsa_scan (the same in both models)"
    config = PalimpsaConfig(d_model=256, n_layer=4, vocab_size=512, d_state=64, upgraded_layers=[1], beta_init=0.1,
                            chunk_size=64)
    model = build(config, "cuda", torch.float32).eval()
    ids = torch.randint(0, 512, (1, 300), device="cuda")
    cu_seqlens = torch.tensor([0, 77, 300], device="cuda")
    results = {}
    for fused in (True, False):
        os.environ["PALIMPSA_MAMBA_SSM"] = "1" if fused else "0"
        modeling.mamba_ssm_chunk_scan.cache_clear()
        with torch.no_grad():
            packed = model(ids, cu_seqlens=cu_seqlens).logits
            cache = modeling.PalimpsaCache(config.n_layer)
            prefix = model(ids[:, :200], cache_params=cache).logits
            steps = torch.cat([model(ids[:, t : t + 1], cache_params=cache).logits for t in range(200, 210)], 1)
        results[fused] = (packed, prefix, steps)
    os.environ["PALIMPSA_MAMBA_SSM"] = "1"
    modeling.mamba_ssm_chunk_scan.cache_clear()
    diffs = [(a - b).abs().max().item() / b.abs().max().item() for a, b in zip(results[True], results[False])]
    # mamba_ssm's float32 dots run in tf32 (about 1e-3 relative on these logits); palimpsa_scan's in full float32.
    status = "OK" if max(diffs) < 5e-3 else "MISMATCH"
    return (f"mamba_ssm fused scan for plain Mamba2 layers vs palimpsa_scan (fp32, relative max diff): packed "
            f"{diffs[0]:.2e}, prefill {diffs[1]:.2e}, decode {diffs[2]:.2e} (tf32 level < 5e-3): {status}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=2560, help="model width (default %(default)s: mamba2-2.7b)")
    parser.add_argument("--n-layer", type=int, default=64, help="layers (default %(default)s: mamba2-2.7b)")
    parser.add_argument("--vocab", type=int, default=50288, help="vocabulary size (default %(default)s)")
    parser.add_argument("--upgraded", type=int, default=8,
                        help="layers upgraded to Palimpsa, spread over depth (default %(default)s; the targets "
                             "name 8 and all)")
    parser.add_argument("--seq-lens", default="8192,16384",
                        help="comma-separated sequence lengths, one sequence per step (default %(default)s; each "
                             "length times both models, so one length is the quicker run)")
    parser.add_argument("--steps", type=int, default=5, help="timed optimizer steps per model (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time each model this many times, alternating (plain, upgraded, upgraded, plain, "
                             "...), each time freshly built; the ratio is the median of the rounds' own ratios "
                             "(default %(default)s; 4 or more where single runs move by a few percent)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps before them: compilation, autotuning (default %(default)s)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--tf32", action="store_true",
                        help="torch.set_float32_matmul_precision('high') for both models: TF32 for float32 matrix "
                             "products, the chunk-parallel backward's corrections included")
    parser.add_argument("--full-recompute", action="store_true",
                        help="also time the upgraded model with plain checkpointing (its scan run twice per step)")
    parser.add_argument("--chunk-size", type=int, default=fused_recurrent.CHUNK_SIZE,
                        help="tokens per scan checkpoint (default %(default)s)")
    parser.add_argument("--block-size", type=int, default=fused_recurrent.BLOCK_SIZE,
                        help="tokens per backward scratch state (default %(default)s)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after each model's timed steps, profile one more and print its N slowest GPU kernels")
    parser.add_argument("--documents", type=int, default=1, metavar="N",
                        help="documents packed into each row with cu_seqlens, as the trainer packs (default "
                             "%(default)s: one document a row)")
    args = parser.parse_args()
    if args.profile < 0:
        parser.error(f"--profile {args.profile}: give the number of kernels to list, e.g. 25")
    if args.documents < 1 or any(int(n) < args.documents for n in args.seq_lens.split(",")):
        parser.error(f"--documents {args.documents}: give at least 1, and at most the shortest of --seq-lens")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    if not torch.cuda.is_available():
        raise SystemExit("bench_train.py needs a CUDA GPU")
    fused_recurrent.CHUNK_SIZE, fused_recurrent.BLOCK_SIZE = args.chunk_size, args.block_size
    if args.tf32:
        torch.set_float32_matmul_precision("high")
    probe = PalimpsaConfig(d_model=args.d_model, n_layer=1, vocab_size=args.vocab)
    bwd_config = fused_recurrent._backward_config(1, probe.nheads, probe.headdim, torch.device("cuda"))
    # PALIMPSA_SCAN_BACKEND=gluon runs the Gluon forward (and, with PALIMPSA_GLUON_BACKWARD=1, backward) instead
    # of the Triton kernels whose settings follow: name it, or a Gluon run reads as a Triton one
    backend = os.environ.get(BACKEND_ENV) or "auto"
    if backend == "gluon" and os.environ.get(GLUON_BACKWARD_ENV) == "1":
        backend += " (Gluon backward)"
    else:
        # the dispatch's own decision for the float32 inputs the layers give the scan
        chosen = os.environ.get(fused_recurrent.BACKWARD_ENV) or "auto"
        scan_input = torch.empty(0, device="cuda", dtype=torch.float32)
        if chosen == "chunked" or (chosen == "auto" and fused_recurrent.chunked_by_default(scan_input)):
            backend += " (chunk-parallel Triton backward)"
        elif chosen == "auto" and fused_recurrent.whole_by_default(scan_input):
            backend += " (Triton backward without splits: the Gluon pass's whole walks where it runs)"
    # the forward the dispatch takes for the float32 inputs the layers give the scan at B = 1 (the first length)
    first = int(args.seq_lens.split(",")[0])
    scan_input = torch.empty(1, device="cuda", dtype=torch.float32).expand(1, first, probe.nheads, probe.headdim)
    if backend == "auto" or "Triton" in backend:
        fwd_config = fused_recurrent.default_forward_config(
            scan_input, None, args.chunk_size, os.environ.get(fused_recurrent.FORWARD_ENV) or "auto")
        if fwd_config.get("kernel") == "chunked":
            from palimpsa.kernels import chunked_fwd

            fwd_config = {**fwd_config, "walk": chunked_fwd.WALK_CONFIG}
    else:
        fwd_config = {"kernel": "gluon"}
    scan = {"backend": backend, "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "chunk_size": args.chunk_size, "block_size": args.block_size,
            "bwd_config": bwd_config, "fwd_config": fwd_config}
    print(f"scan settings: {scan}")
    layers = spread_layers(args.upgraded, args.n_layer)
    fused_check = check_fused_mamba2()
    print(fused_check)
    rows = []
    for seq_len in [int(s) for s in args.seq_lens.split(",")]:
        arms = [("plain", [], True), ("upgraded", layers, True)]
        if args.full_recompute:
            arms.append(("upgraded_full_recompute", layers, False))
        rounds = []
        for index in range(args.rounds):
            measured = {}
            for label, upgraded, keep in round_order(arms, index):
                config = PalimpsaConfig(d_model=args.d_model, n_layer=args.n_layer, vocab_size=args.vocab,
                                        upgraded_layers=upgraded, beta_init=1e-3)
                model = build(config, "cuda", torch.bfloat16)
                try:
                    measured[label] = measure(model, layers, seq_len, args.steps, args.warmup,
                                              keep_scan_outputs=keep, profile_top=args.profile if index == 0 else 0,
                                              documents=args.documents)
                    if "profile" in measured[label]:
                        print_profile(label, seq_len, measured[label]["profile"])
                except torch.cuda.OutOfMemoryError as error:
                    measured[label] = {"error": f"out of memory: {str(error).splitlines()[0]}"}
                del model
                gc.collect()
                torch.cuda.empty_cache()
            rounds.append(measured)
            if args.rounds > 1 and all("tokens_per_s" in measured[label] for label, _, _ in arms):
                print(f"  L {seq_len} round {index + 1}/{args.rounds}: " + ", ".join(
                    f"{label} {measured[label]['tokens_per_s']:,.0f} tok/s" for label, _, _ in arms) +
                    f", ratio {measured['upgraded']['tokens_per_s'] / measured['plain']['tokens_per_s']:.3f} (" +
                    ", ".join(f"{label} {state_text(measured[label].get('gpu_state'))}" for label, _, _ in arms) +
                    "; steps " + ", ".join(f"{label} {steps_text(measured[label].get('steps_s'))}"
                                           for label, _, _ in arms) + ")", flush=True)
        rows.append({"seq_len": seq_len, **combine_rounds(rounds, [label for label, _, _ in arms])})
    device = torch.cuda.get_device_name()
    rows_note = f"{args.documents} documents packed a row" if args.documents > 1 else "one document a row"
    print(f"\nfine-tuning, {args.n_layer} layers x d_model {args.d_model}, layers {layers} trained "
          f"(upgraded in the second model), bf16, activation checkpointing, {rows_note}, {device}")
    print(f"{'L':>6} {'plain tok/s':>12} {'upgr tok/s':>11} {'ratio':>6} {'plain GiB':>10} {'upgr GiB':>9} "
          f"{'ratio':>6}")
    for row in rows:
        plain, upgraded = row["plain"], row["upgraded"]
        if "error" in plain or "error" in upgraded:
            print(f"{row['seq_len']:>6} {plain.get('error', '')} {upgraded.get('error', '')}")
            continue
        print(f"{row['seq_len']:>6} {plain['tokens_per_s']:>12,.0f} {upgraded['tokens_per_s']:>11,.0f} "
              f"{row['throughput_ratio']:>6.2f} {plain['peak_gib']:>10.1f} {upgraded['peak_gib']:>9.1f} "
              f"{row['memory_ratio']:>6.2f}")
        if len(row.get("ratios", [])) > 1:
            print(f"{'':>6} ratios of the {len(row['ratios'])} rounds: "
                  + " ".join(f"{r:.3f}" for r in row["ratios"]) + " (median above; tokens/s: each model's median)")
        if "fastest_step_ratio" in row:
            fastest = row["fastest_steps_s"]
            print(f"{'':>6} fastest steps: plain {fastest['plain']:.3f} s, upgraded {fastest['upgraded']:.3f} s, "
                  f"ratio {row['fastest_step_ratio']:.3f}")
        if "kernel_time_ratio" in row:
            kernel_ms = row["kernel_ms"]
            print(f"{'':>6} GPU kernels a step (--profile): plain {kernel_ms['plain']:.1f} ms, upgraded "
                  f"{kernel_ms['upgraded']:.1f} ms, ratio {row['kernel_time_ratio']:.3f} (the ratio on a host that "
                  "never leaves the GPU idle)")
        if "full_recompute_throughput_ratio" in row:
            full = row["upgraded_full_recompute"]
            print(f"{'':>6} {'(scan recomputed)':>12} {full['tokens_per_s']:>11,.0f} "
                  f"{row['full_recompute_throughput_ratio']:>6.2f} {'':>10} {full['peak_gib']:>9.1f} "
                  f"{row['full_recompute_memory_ratio']:>6.2f}")
    from palimpsa.kernels import chunked_bwd, chunked_fwd

    scan["local_passes_run"] = {k: n for k, n in chunked_bwd.LOCAL_RUNS.items() if n}
    print(f"local passes of the chunk-parallel backward run (chunked_bwd.LOCAL_RUNS): {scan['local_passes_run']}")
    scan["corrections_run"] = {k: n for k, n in chunked_bwd.CORRECT_RUNS.items() if n}
    print(f"corrections of the chunk-parallel backward run (chunked_bwd.CORRECT_RUNS): {scan['corrections_run']}")
    scan["chunk_walks_run"] = {k: n for k, n in chunked_fwd.WALK_RUNS.items() if n}
    print(f"chunk walks of the chunk-parallel forward run (chunked_fwd.WALK_RUNS): {scan['chunk_walks_run']}")
    scan["forward_local_passes_run"] = {k: n for k, n in chunked_fwd.LOCAL_RUNS.items() if n}
    print("local passes of the chunk-parallel forward run (chunked_fwd.LOCAL_RUNS): "
          f"{scan['forward_local_passes_run']}")
    if os.environ.get(chunked_bwd.PROGRAMS_ENV):
        scan["gluon_local_programs"] = os.environ[chunked_bwd.PROGRAMS_ENV]
        print(f"{chunked_bwd.PROGRAMS_ENV}={scan['gluon_local_programs']} (applied to the Gluon local pass where "
              f"it costs no more program time than the default)")
    if chunked_bwd.GLUON_LOCAL_FAILED:
        scan["gluon_local_failed"] = chunked_bwd.GLUON_LOCAL_FAILED
        print(f"the Gluon local pass failed and the Triton pass ran instead: {chunked_bwd.GLUON_LOCAL_FAILED}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": device, "date": time.strftime("%Y-%m-%d"), "layers": layers, "scan": scan,
                       "documents_per_row": args.documents, "rounds": args.rounds,
                       "fused_mamba2_check": fused_check, "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
