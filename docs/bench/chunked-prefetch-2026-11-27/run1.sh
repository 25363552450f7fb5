# First H100 call (2026-11-27): the backward's local pass with quads (GROUP=4: four tokens recomputed together from
# the block start, 2.5 state updates a token instead of 3.5, the decay gradient from the token's own state) against
# pairs, checked in float64 and timed side by side; B = 4 with the sequential kernel likewise.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-prefetch-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config GROUP=4 \
  --json $out/check-quads.json > $out/check-quads.log 2>&1
echo "check quads exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-quads.log | tail -4
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@GROUP=4,chunked@GAUGE=1,chunked@GROUP=4:RELOAD=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local|ms" $out/bench-b1.log | tail -30
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential,sequential@GROUP=4:GAUGE=1:RELOAD=1" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
