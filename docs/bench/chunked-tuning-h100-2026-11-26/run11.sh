# Eleventh H100 call (2026-11-26), after auto took the chunk-parallel forward up to 12 one-warp programs an SM (B = 1
# and 2 at 2.7b shapes): the float64 checks as auto dispatches, and the forward as auto picks it at B = 1, 2, 4.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run11.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 100 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 2x8192,1x8192,4x8192 --backends "triton" \
  --json $out/bench-auto.json > $out/bench-auto.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-auto.log
