# Fourth call: fine-tuning with all 64 layers upgraded, three rounds, with this session's defaults; each round's
# fastest and slowest step and every step's time (train64.json's steps_s), to tell whether a slow round (the upgraded
# model's tokens/s moved by 6% between rounds in docs/bench/fwd-local-2026-11-29, call 16) is slow in every step.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 450 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train64.log | cut -c1-250
