# First call: bench_scan.py's new --rounds and --graphs at the targets' shapes (B = 1 and 4, L = 8192, the default
# backend beside SSD in 5 interleaved rounds, then each replayed from a CUDA graph), and the backward's local pass
# with 16 warps a CTA (the timing macro W16, last timed before LEANA, BULKA and FIXCP) against the default build.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rounds-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 330 python3 scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --backends chunked --rounds 5 --graphs \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/bench.log | tail -16
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 docs/bench/pipea-2026-11-29/time_pipea.py --variants ",W16=1" --rounds 6 > $out/w16.log 2>&1
echo "w16 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/w16.log | tail -6
