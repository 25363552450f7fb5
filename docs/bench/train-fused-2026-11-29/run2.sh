# Second call: fine-tuning with all 64 layers upgraded, three rounds, everything fused, on the Triton cache that call 1
# brought back (carry triton-cache.tgz).
# Run from the repository root with .bench_deps and triton-cache.tgz beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 520 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds|fastest" $out/train64.log | cut -c1-250
