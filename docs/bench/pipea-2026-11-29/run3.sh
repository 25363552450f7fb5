# Third call: why PIPEA's pass A takes 1.48 ms against the default's 0.59 (call 2): ncu on one launch of each build at
# B = 1, L = 2048 (warp states, instruction counts, and the source-level stall samples grouped by how often each
# instruction ran, by the w16 record's group_samples.py: pass A's segment code runs 79,360 times a launch).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section WarpStateStats --section SchedulerStats --section InstructionStats"
for name in default pipea; do
  backend="chunked@LOCAL=cuda"; [ $name = pipea ] && backend="chunked@LOCAL=cuda:CUDA_DEFINES=PIPEA=1"
  timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 $sections -o $out/$name \
    python3 scripts/bench_scan.py --profile --backends $backend > $out/ncu-$name.log 2>&1
  echo "ncu $name exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/ncu-$name.log
  ncu -i $out/$name.ncu-rep --page details > $out/details-$name.txt 2>&1
  ncu -i $out/$name.ncu-rep --page source --csv --print-source sass > $out/$name.csv 2>/dev/null
  python3 docs/bench/w16-2026-11-29/group_samples.py $out/$name.csv > $out/groups-$name.txt 2>&1
  gzip -9 $out/$name.csv; rm -f $out/$name.ncu-rep
  grep -E "Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  " $out/details-$name.txt | head
  head -8 $out/groups-$name.txt
done
