# Third call: what each part of the CUDA local pass costs (CUDA_PROBE bits, timing only: 1 no per-token barrier and
# warp sums of dv, dbeta; 2 no dq/dk/decay-gradient butterflies or atomics; 4 walks of one token; 8 no pass A),
# then ncu's stall reasons and source counters on the pass at B = 1, L = 2048.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
b="chunked@LOCAL=cuda"
timeout 200 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b,$b:CUDA_PROBE=1,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,$b:CUDA_PROBE=8,$b:CUDA_PROBE=15" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -A8 "launches (CUDA" $out/bench.log
p=docs/bench/cuda-local-2026-11-29/profile.py
timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.per_cycle_active,gpu__time_duration.sum,smsp__inst_executed.sum \
  python3 $p 1 2048 > $out/ncu-stalls.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
grep -E "stalled_(barrier|long_scoreboard|short_scoreboard|wait|math|mio|not_selected|dispatch|lg|branch|no_inst|selected|membar|drain|sleeping|tex|imc|misc)_per|issue_active|duration|inst_executed" $out/ncu-stalls.txt | sed 's/  */ /g'
timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 --section SourceCounters -o $out/local \
  python3 $p 1 2048 > $out/ncu.txt 2>&1
echo "ncu2 exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/local.ncu-rep --page source --csv --print-source sass > $out/local.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/local.csv 30 > $out/digest.txt 2>&1; head -50 $out/digest.txt
rm -f $out/local.ncu-rep
