# Fifth call (2026-11-27): call 3 found the local pass's L1 hit rate at 44-46% with or without the prefetches, so
# the prefetched lines may be evicted before their block is walked (about 26 KB of loads a block and program, 8
# programs an SM, against a 224 KB L1). Two ways to keep them: loads at L1's last eviction priority (KEEP) and the
# prefetch issued later, before the block's third or fourth pair (PF_PAIR). Timed side by side with the default.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@KEEP=1,chunked@PF_PAIR=2,chunked@PF_PAIR=3,chunked@KEEP=1:PF_PAIR=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -8
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,sequential@KEEP=1" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
timeout 100 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section SpeedOfLight python3 scripts/bench_scan.py --profile \
  --backends chunked@KEEP=1 > $out/ncu-mem-keep.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
grep -E "Duration|L1/TEX Hit Rate|L2 Hit Rate|Issued Warp" $out/ncu-mem-keep.txt
