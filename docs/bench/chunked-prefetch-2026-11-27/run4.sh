# Fourth call (2026-11-27; an H200): prefetching on by default in both backwards. The float64 checks as auto
# dispatches, and the Triton path as dispatched beside SSD and beside itself without the prefetches.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-prefetch-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 120 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192 \
  --backends "triton,chunked@PREFETCH=0" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b1.log
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "triton,sequential@PREFETCH=0" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
