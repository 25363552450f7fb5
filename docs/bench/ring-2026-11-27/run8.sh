# Eighth call (2026-11-27): the corrections (palimpsa_bwd_correct_kernel) take 1.5 ms of the backward at B = 1,
# L = 8192 (1.8 ms a layer in fine-tuning, 9% of the scan): their tilings timed side by side (BP channels a program,
# correct_warps, BT tokens a sub-block), then ncu's view of the default launch (occupancy, warp states, memory).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@correct_warps=8,chunked@BP=16,chunked@BP=64:correct_warps=8,chunked@BT=32:correct_warps=8" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|correct " $out/bench-b1.log | tail -7
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_correct -c 1 $sections \
  python3 scripts/bench_scan.py --profile --backends chunked > $out/ncu-correct.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|Memory Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|Block Limit" $out/ncu-correct.txt | head -20
