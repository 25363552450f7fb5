# Eleventh call: ncu on the forward's local pass at B = 1, L = 8192 (bf16), the CUDA kernel and the Triton kernel:
# speed of light, occupancy, stall reasons per issued instruction, pipes; then the CUDA kernel's source counters.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run11.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
p=docs/bench/fwd-local-2026-11-29/ncu_fwd.py
timeout 200 ncu --clock-control none -k regex:palimpsa_fwd_local -c 2 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:smsp__inst_executed_pipe_.*sum$,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  python3 $p 1 8192 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
python3 docs/bench/nvrtc-walk-2026-11-28/ncu_stalls.py $out/ncu.txt
grep -E "palimpsa|Duration|DRAM Through|Memory Through|Compute \(SM\)|Achieved Occ|Registers|Issued Warp|No Eligible|dram__bytes|Waves" $out/ncu.txt | sed 's/  */ /g'
timeout 150 ncu --clock-control none -k regex:palimpsa_fwd_local_cuda -c 1 --section SourceCounters -o $out/local \
  python3 $p 1 8192 > $out/ncu2.txt 2>&1
echo "ncu2 exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/local.ncu-rep --page source --csv --print-source sass > $out/local.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/local.csv 30 > $out/digest.txt 2>&1; head -60 $out/digest.txt
rm -f $out/local.ncu-rep
