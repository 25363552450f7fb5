# Thirteenth call (2026-11-27): call 12's stall samples put the corrections' two most-waiting instructions (18% of the
# samples, ~740 cycles an execution) on the shared-memory stores that take the local dv and dbeta, loaded after the
# sub-block's products for its read-modify-write, into the products' layout. correct_early loads them at the
# sub-block's start (1) or one sub-block ahead (2). Timed side by side at B = 1, L = 8192; float64 checks of both
# with the chunked backward forced.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run13.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@correct_early=1,chunked@correct_early=2" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|correct " $out/bench-b1.log | tail -4
for e in 2 1; do
  left=$(( (590 - ($(date +%s) - start)) / 2 )); [ $e = 1 ] && left=$(( left * 2 ))
  timeout $left python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config correct_early=$e \
    --json $out/check-early$e.json > $out/check-early$e.log 2>&1
  echo "check early=$e exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-early$e.log | tail -3
done
