# Third call (2026-11-27; the machine lent was an H200): the local pass with the next block's inputs prefetched
# into L1 (PREFETCH: ncu found a third of its stall cycles waiting on L1TEX), checked in float64 and timed side by
# side with the default, with quads, and at B = 4 with the sequential kernel.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-prefetch-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config PREFETCH=1 \
  --json $out/check-prefetch.json > $out/check-prefetch.log 2>&1
echo "check prefetch exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-prefetch.log | tail -4
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PREFETCH=1,chunked@GROUP=4,chunked@GROUP=4:PREFETCH=1" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -8
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "sequential,sequential@PREFETCH=1" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
