# First call (2026-11-27): what the local pass's dk/dq atomics cost (PROBE=1 leaves them out: timing only, wrong
# gradients), whether the programs running at once contend on the same tokens' dk/dq lines (ORDER=1 takes the split
# fastest, so that they walk NSPLIT different chunks; NSPLIT 8 gives 8), and the corrections over all 64 channels of
# a head (BP=64: half the dk atomics of BP 32). The float64 checks with ORDER=1 first.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-atomics-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config ORDER=1 \
  --json $out/check-order.json > $out/check-order.log 2>&1
echo "check order exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-order.log | tail -4
timeout 240 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PROBE=1,chunked@ORDER=1,chunked@ORDER=1:NSPLIT=8,chunked@BP=64:correct_warps=8,chunked@ORDER=1:PROBE=1" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -20
