# Second call: why 16 warps a CTA (W16=1) ran slower than 8 in call 1 (10.12 against 8.97 ms, bf16). ncu on one
# launch of each at B = 1, L = 2048 (warp states, scheduler, instruction counts, source-level stall samples of W16
# digested by scripts/ncu_source_digest.py).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section InstructionStats --section SpeedOfLight"
sections="$sections --section MemoryWorkloadAnalysis"
for v in default w16; do
  backend="chunked@LOCAL=cuda"; [ $v = w16 ] && backend="chunked@LOCAL=cuda:CUDA_DEFINES=W16=1"
  timeout 200 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 $sections -o $out/$v \
    python3 scripts/bench_scan.py --profile --backends $backend > $out/ncu-$v.log 2>&1
  echo "ncu $v exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/ncu-$v.log
  ncu -i $out/$v.ncu-rep --page details > $out/details-$v.txt 2>&1
  ncu -i $out/$v.ncu-rep --page source --csv --print-source sass > $out/$v.csv 2>/dev/null
  python3 scripts/ncu_source_digest.py $out/$v.csv 60 > $out/digest-$v.txt 2>&1
  gzip -9 $out/$v.csv; rm -f $out/$v.ncu-rep
  grep -E "Duration|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Ipc|Executed Instructions  |Achieved Occupancy|Bank" $out/details-$v.txt | head -14
done
