# Second call (a fresh machine): fine-tuning with the committed kernels, 8 and then all 64 layers upgraded, each
# model built and timed 4 times in alternating order (bench_train.py --rounds), the ratio the median of the rounds'.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 250 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 4 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log
left=$(( 575 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 4 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train64.log
