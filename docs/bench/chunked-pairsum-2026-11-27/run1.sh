# First call (2026-11-27): dv and dbeta of a pair's two tokens reduced together by a butterfly over the lanes
# (PAIRSUM: 24 shuffles a pair instead of 80, no shared-memory conversion before the stores), in the chunk-parallel
# backward's local pass (B = 1) and in the sequential backward (B = 4): the float64 checks with it, then both timed
# beside the default.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-pairsum-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config PAIRSUM=1 \
  --json $out/check-pairsum.json > $out/check-pairsum.log 2>&1
echo "check pairsum exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-pairsum.log | tail -4
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PAIRSUM=1,chunked@PAIRSUM=1:PROBE=4" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "triton,sequential@PAIRSUM=1" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
