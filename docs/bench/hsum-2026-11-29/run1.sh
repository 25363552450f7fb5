# First call: the local pass's dq/dk channel sums on tensor cores (timing macro HSUM) on a GPU for the first time.
# check_local.py's seven cases with HSUM=1 against float64 and the Gluon pass; the local pass with and without it,
# interleaved (peel record's time_tsub.py, TSUB 6); then forward + backward at B = 1, L = 8192 beside SSD on this
# fresh machine (the default build, with the launches' breakdown).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines HSUM=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -3; grep -E "  d[a-zA-Z_0-9]+ +[0-9.e+-]+ +[0-9.e+-]+ +yes" $out/check.log | sort -k2 -g | tail -0
timeout 150 python3 docs/bench/peel-2026-11-29/time_tsub.py --tsubs 6 --defines ",HSUM=1" > $out/time_hsum.log 2>&1
echo "time_hsum exit $? at $(( $(date +%s) - start )) s"; tail -8 $out/time_hsum.log
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 --backends chunked \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +[a-z@_=0-9]+ +[0-9]+ +[0-9]+ \||local " $out/bench-b1.log
