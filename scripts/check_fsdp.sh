#!/usr/bin/env bash
# Several-GPU FSDP fine-tuning check (run on a machine with 2 GPUs): scripts/check_fsdp.py with its defaults, the
# tiny recipe on one GPU with gradient accumulation 2 against two GPUs with FSDP at the same global batch, with
# activation checkpointing on and off, then one rank killed and the run resumed; OUTDIR/report.json holds the
# figures.   bash scripts/check_fsdp.sh OUTDIR [check_fsdp.py options, e.g. --steps 60]
set -euo pipefail
out=${1:-/tmp/fsdp-check}
shift || true
exec python3 "$(dirname "$0")/check_fsdp.py" "$out" "$@"
