# First call: the CUDA local pass with peeled states (cuda_local TSUB 6) on a GPU for the first time. check_local.py
# runs its seven cases with it against float64 and against the Gluon pass; time_tsub.py times it against CUDA_TSUB 0
# (every state from a product) and thresholds 4 and 8, in bf16 and fine-tuning's mix, on two decay draws; then
# forward + backward at B = 1, L = 8192 beside SSD, with the launches' breakdown.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed|run:" $out/check.log | head -40
grep -E " vs " $out/check.log | sort -k6 -g | tail -3
timeout 120 python3 docs/bench/peel-2026-11-29/time_tsub.py > $out/time_tsub.log 2>&1
echo "time_tsub exit $? at $(( $(date +%s) - start )) s"; tail -20 $out/time_tsub.log
timeout 120 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked@CUDA_TSUB=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -14 $out/bench-b1.log
