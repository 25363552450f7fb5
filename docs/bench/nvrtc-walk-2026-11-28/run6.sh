# Sixth call: how many of a lane's 4 groups of states should share reciprocals (1, 2 or 3), checked and timed;
# then ncu's source counters on the shipped walk (pr2) at B = 1, L = 8192, digested per SASS instruction
# (scripts/ncu_source_digest.py): where its "dispatch" stalls fall. Its first part timed the shipped walk under
# every name (walk_cuda.py did not yet turn the chunked forward's own CUDA walk off); call 7 repeats that part.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
walk=docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py
timeout 240 python3 $walk --rounds 5 --variants pr1=16:2:1:64:1,pr2=16:2:1:64:2,pr3=16:2:1:64:3 > $out/walk.log 2>&1
echo "walk exit $? at $(( $(date +%s) - start )) s"; grep -E "forward|NO|nan|False" $out/walk.log | tail -16
timeout 200 ncu --clock-control none -k regex:palimpsa_walk_cuda -c 1 --section SourceCounters -o $out/walk \
  python3 $walk --profile --shapes 1x8192 --variants pr2=16:2:1:64:2 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/walk.ncu-rep --page source --csv --print-source sass > $out/walk.csv 2>/dev/null
python3 scripts/ncu_source_digest.py $out/walk.csv 30 > $out/digest.txt 2>&1; head -60 $out/digest.txt
rm -f $out/walk.ncu-rep
