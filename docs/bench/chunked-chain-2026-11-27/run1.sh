# First call (2026-11-27): the reverse step's sums as FFMA chains, the pair's decay gradients in one butterfly
# (CHAIN), and each decay of the recompute from one ex2.approx.ftz (FAST_EXP), both on by default: the float64 checks
# as auto dispatches (the chunk-parallel backward for bf16, the sequential one for float32 without TF32), then the
# local pass timed with neither (the previous default), with FAST_EXP alone and with both, and the sequential
# backward at B = 4 with neither and with both.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-chain-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 260 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@CHAIN=0:FAST_EXP=0,chunked@CHAIN=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
timeout 130 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@CHAIN=0:FAST_EXP=0,triton" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
