"""Pretraining throughput of candidate small Mamba2 sizes, to size a base model to a GPU-time budget.

    python scripts/bench_pretrain_sizes.py [--sizes 384x6x64,448x8x64,512x8x128] [--batch 64] [--length 512]

For each ``d_model x n_layer x d_state`` (headdim 64, expand 2, byte vocabulary) it builds a plain Mamba2 from
scratch, runs ``--steps`` AdamW steps in bf16 autocast on random tokens after a warm-up, and prints parameters,
tokens/s and the minutes that 1B tokens would take. Plain Mamba2 layers use mamba_ssm's fused SSD when it imports
(``PALIMPSA_MAMBA_SSM=0`` turns it off), else the Triton scan with ``beta=None``; both are timed when mamba_ssm is
present.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch


def build(d_model: int, n_layer: int, d_state: int):
    from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM

    config = PalimpsaConfig(d_model=d_model, n_layer=n_layer, d_state=d_state, headdim=64, expand=2,
                            vocab_size=272, chunk_size=64)
    return PalimpsaForCausalLM(config).cuda()


def tokens_per_second(model, batch: int, length: int, steps: int) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 257, (batch, length), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return batch * length * steps / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="384x6x64,448x8x64,512x8x128")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from palimpsa.upgrade.model import modeling

    fused_available = modeling.mamba_ssm_chunk_scan() is not None
    rows = []
    for size in args.sizes.split(","):
        d_model, n_layer, d_state = (int(x) for x in size.split("x"))
        for fused in ([True, False] if fused_available else [False]):
            os.environ["PALIMPSA_MAMBA_SSM"] = "1" if fused else "0"
            modeling.mamba_ssm_chunk_scan.cache_clear()
            torch.manual_seed(0)
            model = build(d_model, n_layer, d_state)
            params = sum(p.numel() for p in model.parameters())
            rate = tokens_per_second(model, args.batch, args.length, args.steps)
            row = {"size": size, "parameters": params, "scan": "mamba_ssm SSD" if fused else "palimpsa triton",
                   "tokens_per_s": round(rate), "minutes_per_1B_tokens": round(1e9 / rate / 60, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            del model
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "batch": args.batch, "length": args.length,
                       "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
