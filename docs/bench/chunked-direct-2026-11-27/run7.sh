# Seventh call (2026-11-27): the persistent local programs take their work items from per-SM queues (BY_SM), so
# that the eight programs an SM holds walk the same tokens of one head and chunk at once and share the L1 lines of
# their inputs (in turn, the eight come from eight different heads). The float64 checks with it, the L1 hit rate
# with and without it, and both timed side by side at B = 1 and, with one split, at B = 4.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config BY_SM=1 \
  --json $out/check-bysm.json > $out/check-bysm.log 2>&1
echo "check by-sm exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-bysm.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@BY_SM=1" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -6
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "triton,chunked@NSPLIT=1,chunked@NSPLIT=1:BY_SM=1" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
for b in chunked chunked@BY_SM=1; do
  timeout 60 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section MemoryWorkloadAnalysis \
    --section SchedulerStats --section SpeedOfLight python3 scripts/bench_scan.py --profile --backends $b \
    > $out/ncu-mem-${b//[@=]/-}.txt 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
  grep -E "Duration|L1/TEX Hit Rate|L2 Hit Rate|Issued Warp" $out/ncu-mem-${b//[@=]/-}.txt
done
