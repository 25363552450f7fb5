# First call: where the backward's CUDA corrections (0.63 ms at B = 1, L = 8192, about 4x what their shared-memory
# reads and DRAM bytes take) spend their time: ncu on one launch at B = 1, L = 8192, bf16 (the pipea record's
# time_pipea.py, one round; the second corrections launch, after the one that compiles), source-level stall samples
# digested by scripts/ncu_source_digest.py, and the warp-state, scheduler, memory and occupancy sections.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/correct-ncu-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section InstructionStats --section SpeedOfLight"
sections="$sections --section MemoryWorkloadAnalysis"
timeout 300 ncu --clock-control none -k regex:palimpsa_bwd_correct_cuda --launch-skip 1 -c 1 $sections \
  -o $out/correct python3 docs/bench/pipea-2026-11-29/time_pipea.py --variants "" --rounds 1 > $out/ncu.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/ncu.log
ncu -i $out/correct.ncu-rep --page details > $out/ncu-details.txt 2>&1
ncu -i $out/correct.ncu-rep --page source --csv --print-source sass > $out/correct.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/correct.csv 60 > $out/digest.txt 2>&1
gzip -9 $out/correct.csv; rm -f $out/correct.ncu-rep
grep -E "Duration|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Ipc|Throughput|Achieved Occ" \
  $out/ncu-details.txt | head -20
head -30 $out/digest.txt
