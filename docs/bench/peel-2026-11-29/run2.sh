# Second call: where the CUDA local pass with peeled states waits (ncu, one launch at B = 1, L = 2048: source-level
# stall samples digested by scripts/ncu_source_digest.py, and the warp-state and scheduler sections), then
# fine-tuning with 8 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
sections="--section SourceCounters --section Occupancy --section LaunchStats --section WarpStateStats"
sections="$sections --section SchedulerStats --section InstructionStats --section SpeedOfLight"
timeout 200 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 $sections -o $out/local \
  python3 scripts/bench_scan.py --profile --backends chunked@LOCAL=cuda > $out/ncu.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/ncu.log
ncu -i $out/local.ncu-rep --page details > $out/ncu-details.txt 2>&1
ncu -i $out/local.ncu-rep --page source --csv --print-source sass > $out/local.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/local.csv 60 > $out/digest.txt 2>&1
gzip -9 $out/local.csv; rm -f $out/local.ncu-rep
grep -E "Duration|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Ipc" $out/ncu-details.txt | head
head -40 $out/digest.txt
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|RUNS" $out/train8.log
