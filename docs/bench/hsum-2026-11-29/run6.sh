# Sixth call: the decay gradient's <dM, M> + <dI, J> in 4 chains of FFMAs (SSPLIT 1) as the default. check_local.py's
# seven cases; the local pass against SSPLIT 0 (the form before), interleaved, 8 rounds; fine-tuning with 8 layers
# upgraded (bench_train.py --rounds 2).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 100 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:SSPLIT=0" --rounds 8 \
  > $out/time_ssplit.log 2>&1
echo "time_ssplit exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/time_ssplit.log
left=$(( 400 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log
