# First call (2026-11-27): REVERSE, pass B undoing a block's updates from its end state where the block's log decays
# sum to at most the bound (fused_recurrent._reversed_block; on by default for 16-bit inputs at 4). Timed side by
# side with the walks (REVERSE=0) and bounds 2 and 6 at B = 1, L = 8192, and in the sequential backward at B = 4;
# float64 checks as auto dispatches (bf16 cases undo, float32 ones walk) and with the chunked backward forced and
# every dtype at bound 4 (what float32 would lose).
# The code: c2c8931 with reverse-separate.patch applied (git apply docs/bench/reverse-2026-11-27/...).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@REVERSE=0,chunked,chunked@REVERSE=2,chunked@REVERSE=6" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@REVERSE=0,sequential" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log | tail -2
timeout 150 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -3
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config REVERSE=4 \
  > $out/check-forced4.log 2>&1
echo "check forced exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-forced4.log | tail -8
