#!/usr/bin/env bash
# Two-GPU FSDP fine-tuning check (run on a machine with 2 GPUs): the tiny recipe trained on one GPU with
# gradient accumulation 2 and on two GPUs with FSDP (same global batch), then compared, and the FSDP run's saved
# model loaded on one device.   bash scripts/check_fsdp.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/fsdp-check}
common=(data.seq_len=256 data.batch_size=2 eval.passkey_samples=0 eval.batches=2 logging.tensorboard=false
        trainable.mode=upgraded train.max_steps=30 train.log_every=1 checkpoint.every=15 train.mixed_precision=no)
python3 -m palimpsa.upgrade.cli.finetune_model recipes/tiny-cpu.yaml "${common[@]}" train.grad_accum=2 output_dir="$out/one" \
    > "$out-one.log" 2>&1
accelerate launch --config_file recipes/accelerate/fsdp-2gpu.yaml --mixed_precision no \
    -m palimpsa.upgrade.cli.finetune_model recipes/tiny-cpu.yaml "${common[@]}" output_dir="$out/two" > "$out-two.log" 2>&1
python3 - "$out" <<'PY'
import json, sys, torch
import palimpsa.upgrade
from palimpsa.upgrade import PalimpsaForCausalLM
out = sys.argv[1]
rows = {run: [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")] for run in ("one", "two")}
evals = {run: [r["eval_nll"] for r in rows[run] if "eval_nll" in r] for run in rows}
print("eval NLL one GPU (grad accum 2):", evals["one"])
print("eval NLL two GPUs (FSDP)       :", evals["two"])
one = PalimpsaForCausalLM.from_pretrained(f"{out}/one/final").cuda()
two = PalimpsaForCausalLM.from_pretrained(f"{out}/two/final").cuda()
diff = max((a - b).abs().max().item() for a, b in zip(one.state_dict().values(), two.state_dict().values()))
ids = torch.randint(0, 257, (1, 128), device="cuda")
with torch.no_grad():
    logits = (one(ids).logits - two(ids).logits).abs().max().item()
print(f"FSDP model loads on one device; max weight diff {diff:.3g}, max logit diff {logits:.3g}")
PY
