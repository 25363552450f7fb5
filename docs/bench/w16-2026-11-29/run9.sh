# Ninth call: why two CTAs an SM (C2 1) ran 5% slower than one in call 8: ncu on one launch at B = 1, L = 2048
# (occupancy, warp states, scheduler, instruction counts, the stall samples grouped by executions).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section InstructionStats --section SpeedOfLight"
timeout 200 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 $sections -o $out/c2 \
  python3 scripts/bench_scan.py --profile --backends chunked@LOCAL=cuda:CUDA_DEFINES=C2=1 > $out/ncu-c2.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/ncu-c2.log
ncu -i $out/c2.ncu-rep --page details > $out/details-c2.txt 2>&1
ncu -i $out/c2.ncu-rep --page source --csv --print-source sass > $out/c2.csv 2>/dev/null
python3 docs/bench/w16-2026-11-29/group_samples.py $out/c2.csv > $out/groups-c2.txt 2>&1
gzip -9 $out/c2.csv; rm -f $out/c2.ncu-rep
grep -E "Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Achieved Occupancy|Block Limit|Grid Size" $out/details-c2.txt | head -14
cat $out/groups-c2.txt
