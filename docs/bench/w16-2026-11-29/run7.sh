# Seventh call: where the local pass's time goes with pass A's stages lean (LEANA 1, the default since call 3): ncu on
# one launch at B = 1, L = 2048 (the warp states, scheduler and instruction counts, and the source-level stall samples
# grouped by how often each instruction ran, by group_samples.py: per token, per segment, per work item).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section InstructionStats --section SpeedOfLight"
timeout 200 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 $sections -o $out/lean \
  python3 scripts/bench_scan.py --profile --backends chunked@LOCAL=cuda > $out/ncu-lean.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/ncu-lean.log
ncu -i $out/lean.ncu-rep --page details > $out/details-lean.txt 2>&1
ncu -i $out/lean.ncu-rep --page source --csv --print-source sass > $out/lean.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/lean.csv 60 > $out/digest-lean.txt 2>&1
python3 docs/bench/w16-2026-11-29/group_samples.py $out/lean.csv > $out/groups-lean.txt 2>&1
gzip -9 $out/lean.csv; rm -f $out/lean.ncu-rep
grep -E "Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  " $out/details-lean.txt | head
cat $out/groups-lean.txt
