# Fifth call (2026-11-27): the segments' walks back in a loop (call 2's kernel; unrolled they took 255 registers and
# the pass 14.72 ms). Whether the Gluon pass's 16 KB of shared memory a program costs it L1 hits: ncu's memory
# workload analysis of both local passes (B = 1, L = 2048), then both timed side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for b in chunked chunked@LOCAL=gluon:SEG=4; do
  name=${b//[@=:]/-}
  kernel=palimpsa_bwd_local; [[ $b == *gluon* ]] && kernel=palimpsa_gluon_local
  timeout 150 ncu --clock-control none -k regex:$kernel -c 1 --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section SpeedOfLight --section Occupancy \
    python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-mem-$name.txt 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
  grep -E "Duration|L1/TEX Hit Rate|L2 Hit Rate|Issued Warp|DRAM Throughput|Shared Memory Configuration Size|Dynamic Shared" $out/ncu-mem-$name.txt
done
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:SEG=4" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
