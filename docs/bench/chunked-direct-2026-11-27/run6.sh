# Sixth call (2026-11-27): call 5 found the prefetch issued later (before a block's third or fourth pair instead of
# at its start) 8% slower, so its lead time matters; PREFETCH=3 also prefetches the block two ahead (with its slab
# start in pass B) into L2. The float64 checks with it, and timed side by side with the default at B = 1 and 4.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config PREFETCH=3 \
  --json $out/check-pf3.json > $out/check-pf3.log 2>&1
echo "check pf3 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-pf3.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PREFETCH=3,chunked@PREFETCH=0" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -6
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,sequential@PREFETCH=3" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
