# Ninth call: BULKA 0 against 1 once more (time_probes.py, 8 rounds), then fine-tuning with 8 layers upgraded again
# (bench_train.py --rounds 2; call 8's second round had the upgraded model 3% slower at the same clocks).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 45 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:BULKA=0,0:" --rounds 8 \
  > $out/probes.log 2>&1
echo "probes exit $? at $(( $(date +%s) - start )) s"; grep "local pass" $out/probes.log
left=$(( 195 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds" $out/train8.log | cut -c1-250
