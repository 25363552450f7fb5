# Third call (2026-11-27): the source counters of call 2 found the walk's and the pair's first loads waiting
# 140-210 cycles each (L2, not L1, latencies) and the loop-carried pipeline of call 2 adding layout conversions
# under Triton 3.6; PIPELINE=1 only loads a pair's own inputs before its walk (no loop-carried values). The
# float64 checks with it on, timed against it off and without the prefetches, and the L1 hit rate of the local
# pass (ncu's memory workload analysis) with and without the prefetches.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config PIPELINE=1 \
  --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@PIPELINE=1,chunked,chunked@PIPELINE=1:PREFETCH=0,chunked@PREFETCH=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -8
for b in chunked@PIPELINE=1 chunked@PIPELINE=1:PREFETCH=0; do
  timeout 100 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section SpeedOfLight \
    python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-mem-${b//[@=]/-}.txt 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
  grep -E "Duration|L1/TEX Hit Rate|L2 Hit Rate|Issued Warp|Mem Busy|Max Bandwidth|DRAM Throughput" $out/ncu-mem-${b//[@=]/-}.txt
done
