"""Variants of the chunk-parallel forward's CUDA C++ chunk walk (``kernels/cuda_walk.py``, compiled at run time by
NVRTC) beside the Triton walk: the same chunk checkpoints in, the same ``y`` out.

Each variant is ``kernels/cuda_walk.py``'s kernel compiled with other options (``--variants
NAME=BT:MINB:PAIRS:CW[:PAIRRCP[:KKC]]``: tokens a shared-memory stage, CTAs an SM the registers are capped for, two
tokens an iteration or one, channels a CTA, groups of 4 states whose two channels share a reciprocal, keys squared in
the walk). Calls 1-3 of this record ran the prototype's own copy of the kernel (commit e4ac244 has it; call 1 an
earlier version still), which these options reproduce; the shipped kernel is ``16:2:1:64:2``.

Modes:
  ``--sass``   compile for sm_90a on this machine (a CPU is enough: NVRTC from the ``nvidia-cuda-nvrtc-cu12``
               wheel, ``PALIMPSA_NVRTC=/path/libnvrtc.so.12``; cuobjdump from Triton's wheel) and count the token
               loop's SASS instructions;
  default      on a GPU: ``y`` against the Triton walk's and a float64 reference, then the forward with each walk
               (local pass and carry shared) timed in interleaved rounds, and the walks alone.
Run from the repository root: ``python3 docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py [--sass]``."""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch
from palimpsa.kernels import cuda_walk


def variant_options(spec: str) -> dict:
    """``BT:MINB:PAIRS:CW[:PAIRRCP[:KKC]]`` -> ``cuda_walk.compile_cubin``'s keywords (shared reciprocals and squared
    keys 0 where not given)."""
    values = [int(x) for x in spec.split(":")] + [0, 0]
    names = ("block", "min_blocks", "pairs", "channels", "pair_groups", "square_keys")
    return dict(zip(names, values[:6]))


def sass(cubin: bytes) -> str:
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-sass", "-res-usage", f.name], capture_output=True, text=True, check=True)
    return res.stdout


def token_loop_counts(text: str, tokens: int = 1) -> dict:
    """The innermost backward branch's loop (the token loop): its instructions on the path without the
    renormalisation (forward branches skipped over), by opcode."""
    ins = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(3), m.group(4)))
    addr = {a: n for n, (a, _, _) in enumerate(ins)}
    loops = []
    for n, (a, op, args) in enumerate(ins):
        t = re.search(r"0x([0-9a-f]+)", args)
        if op.startswith("BRA") and t and int(t.group(1), 16) < a and int(t.group(1), 16) in addr:
            loops.append((addr[int(t.group(1), 16)], n))
    # the token loop: the innermost loop with the work of ``tokens`` tokens (over 96 FFMAs a lane and token)
    start, end = max(loops, key=lambda x: (
        sum(ins[n][1].startswith("FFMA") for n in range(x[0], x[1] + 1)) >= 96 * tokens, x[0] - x[1]))
    counts, n = {}, start
    while n <= end:
        a, op, args = ins[n]
        counts[op.split(".")[0]] = counts.get(op.split(".")[0], 0) + 1
        t = re.search(r"0x([0-9a-f]+)", args)
        if op.startswith("BRA") and t and int(t.group(1), 16) > a and n != end:
            n = addr[int(t.group(1), 16)]  # a forward branch: the renormalisation skipped
            continue
        n += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", action="store_true", help="compile for sm_90a here and count the token loop")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="one forward with each walk at the first shape, bf16, nothing checked or timed (for ncu)")
    parser.add_argument("--shapes", default="1x8192,4x8192")
    parser.add_argument("--variants", default="bt16=16:2:1:64,pr2=16:2:1:64:2,pr4=16:2:1:64:4,kkc=16:2:1:64:0:1,"
                                              "pr2kkc=16:2:1:64:2:1",
                        help="NAME=BT:MINB:PAIRS:CW[:PAIRRCP[:KKC]],... (tokens a shared-memory stage, CTAs an SM the "
                             "registers are capped for, two tokens an iteration, channels a CTA, groups of 4 states "
                             "whose two channels share a reciprocal (0-4), keys squared in the walk)")
    args = parser.parse_args()
    if args.sass:
        for item in args.variants.split(","):
            name, _, spec = item.partition("=")
            options = variant_options(spec)
            for dtype in (torch.bfloat16, torch.float32):
                text = sass(cuda_walk.compile_cubin(dtype, 80, 1, 64, 512, **options))
                report(name, dtype, text, 1 + options["pairs"])
        return
    run_gpu(args)


def report(name, dtype, text, tokens):
    """Registers and the token loop's instructions a token and lane, by opcode."""
    regs = re.findall(r"REG:(\d+)", text)
    counts = token_loop_counts(text, tokens)
    total = sum(counts.values())
    print(f"{name} {dtype}, {tokens} token(s) an iteration: registers {regs}, token loop {total / tokens:.1f} "
          f"instructions a token and lane ({total / tokens / 32:.2f} an element-token): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda x: -x[1])))


def run_gpu(args):
    # the chunked forward's own choice of walk off, so that "triton" is the Triton walk and each variant
    # kernels/cuda_walk.py's kernel compiled with the variant's options, patched in below
    os.environ["PALIMPSA_CUDA_WALK"] = "0"
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
    import bench_scan
    from palimpsa.kernels import chunked_fwd
    from palimpsa.kernels import fused_recurrent as fr
    from triton.testing import do_bench

    real_walk = fr._walk
    variants = {}
    for item in args.variants.split(","):
        name, _, spec = item.partition("=")
        variants[name] = variant_options(spec)
    current = {"variant": next(iter(variants))}

    def cuda_walk(v, k, q, log_decay, beta, m0, i0, importance_prior, cu_seqlens, offsets, n_chunks, ck_m, ck_i,
                  output_final_state, output_uncertainty, store_checkpoints, fwd_config, chunk_size, chunks=None):
        assert chunks is not None and cu_seqlens is None and m0 is None and not output_final_state
        assert not output_uncertainty and beta is not None
        ip = fr._prior_tensor(importance_prior, torch.float32, v.device)
        cuda_walk.POISON_OUTPUTS = fr.POISON_OUTPUTS
        y, _, _ = cuda_walk.walk(v, k.float(), q.float(), log_decay, beta, ck_m, ck_i, ip, None, None, n_chunks,
                                 v.shape[0], chunks, chunk_size, False, variant=variants[current["variant"]])
        return y, None, None, None

    def forward(inputs, variant):
        use_cuda = variant != "triton"
        current["variant"] = variant if use_cuda else current["variant"]
        chunked_fwd.fr._walk = cuda_walk if use_cuda else real_walk
        try:
            with torch.no_grad():
                return fr.fused_recurrent_palimpsa_scan(
                    inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 1.0, None, False,
                    False, fwd_config={"kernel": "chunked"}, bwd_config=None)[0]
        finally:
            chunked_fwd.fr._walk = real_walk

    if args.profile:
        batch, length = (int(x) for x in args.shapes.split(",")[0].split("x"))
        inputs = bench_scan.scan_inputs(batch, length)
        for name in ["triton", *variants]:
            forward(inputs, name)
        torch.cuda.synchronize()
        return
    print("machine:", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    # correctness: against the Triton walk and a float64 reference (naive), bf16 and float32, fast decays too
    from palimpsa.kernels import naive
    for dtype in (torch.bfloat16, torch.float32):
        for (batch, length, fast) in ((1, 1024, False), (2, 1001, True), (1, 8192, False)):
            bench_scan.OURS_DTYPE = dtype
            inputs = bench_scan.scan_inputs(batch, length, seed=batch * 7 + length + fast)
            if fast:  # decays down to e^-10 a token: renormalised at most tokens
                inputs["log_decay"] = -10 * torch.rand_like(inputs["log_decay"])
            want = forward(inputs, "triton").double()
            ref = None
            if length <= 1024:
                ref = naive.naive_palimpsa_scan(*(inputs[n].double() for n in ("v", "k", "q", "log_decay", "beta")),
                                                1.0, None)[0]
            for name in variants:
                fr.POISON_OUTPUTS = True  # every y filled with NaN before its launch
                got = forward(inputs, name).double()
                line = (f"{str(dtype):>15} B={batch} L={length} fast={fast} {name}: cuda vs triton "
                        f"{((got - want).norm() / want.norm()).item():.2e}")
                if ref is not None:
                    line += (f", cuda vs float64 {((got - ref).norm() / ref.norm()).item():.2e}, triton vs float64 "
                             f"{((want - ref).norm() / ref.norm()).item():.2e}")
                line += f", finite {bool(torch.isfinite(got).all())}"
                print(line, flush=True)
            fr.POISON_OUTPUTS = False
    # timing: the whole forward with each walk, interleaved rounds; then the walks alone on one set of checkpoints
    for dtype in (torch.bfloat16, torch.float32):
        bench_scan.OURS_DTYPE = dtype
        if dtype == torch.float32:
            torch.set_float32_matmul_precision("high")
        for shape in args.shapes.split(","):
            batch, length = (int(x) for x in shape.split("x"))
            inputs = bench_scan.scan_inputs(batch, length)
            names = ["triton", *variants]
            times = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    times[name].append(do_bench(lambda n=name, x=inputs: forward(x, n), warmup=25, rep=200,
                                                return_mode="median"))
            tri = statistics.median(times["triton"])
            for name in names:
                med = statistics.median(times[name])
                print(f"{str(dtype):>15} B={batch} L={length} forward with the {name:>6} walk: {med:.3f} ms "
                      f"({med / tri:.3f}x triton's; rounds {min(times[name]):.3f}-{max(times[name]):.3f})",
                      flush=True)
    torch.set_float32_matmul_precision("highest")


if __name__ == "__main__":
    main()
