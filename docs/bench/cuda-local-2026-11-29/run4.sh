# Fourth and fifth calls: ncu's stall reasons and source counters on the CUDA local pass at B = 1, L = 2048 (run3.sh's
# ncu part again, its driver naming the pass by environment variables). Call 4 ran it with the driver called
# profile.py, which shadowed the standard library module that torch._dynamo imports; call 5 with ncu_target.py.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
p=docs/bench/cuda-local-2026-11-29/ncu_target.py
timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.per_cycle_active,gpu__time_duration.sum,smsp__inst_executed.sum \
  python3 $p 1 2048 > $out/ncu-stalls.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
python3 docs/bench/nvrtc-walk-2026-11-28/ncu_stalls.py $out/ncu-stalls.txt
grep -E "issue_active|duration|inst_executed" $out/ncu-stalls.txt | sed 's/  */ /g'
timeout 150 ncu --clock-control none -k regex:palimpsa_bwd_local_cuda -c 1 --section SourceCounters -o $out/local \
  python3 $p 1 2048 > $out/ncu.txt 2>&1
echo "ncu2 exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/local.ncu-rep --page source --csv --print-source sass > $out/local.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/local.csv 30 > $out/digest.txt 2>&1; head -45 $out/digest.txt
rm -f $out/local.ncu-rep
