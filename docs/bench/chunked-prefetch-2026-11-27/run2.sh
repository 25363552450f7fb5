# Second H100 call (2026-11-27): where the local pass's cycles go (ncu's warp states, pairs and quads, B = 1,
# L = 2048), and what a shorter recompute walk is worth (BS = 4: every 4th state in the slab, twice the scratch).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-prefetch-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats"
for b in chunked chunked@GROUP=4; do
  timeout 90 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 $sections \
    python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-${b//[@=]/-}.txt 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
done
grep -h -E "Duration|Stall|Warp Cycles Per Issued|Issued Warp|Achieved Occupancy|Registers Per|Waves Per SM|No Eligible|Executed Instructions  " $out/ncu-*.txt | head -60
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --block-size 4 \
  --backends "chunked,chunked@GROUP=4" --json $out/bench-bs4.json > $out/bench-bs4.log 2>&1
echo "bench bs4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-bs4.log | tail -8
