# Note (found in call 6, fixed before call 7): chunked_bwd passed bool(STAGE) to the launch, so this call ran
# STAGE 1 wherever it asked for 2 or 3 (README.md).
# Sixth call (2026-11-28): call 3's STAGE 2 (values and gains staged too) tied with STAGE 1; a walk step still read its
# decay from global memory. STAGE 3 stages every per-token input of pass B: keys, queries, values, gains, decays (float32
# decays only; others run STAGE 2) and output gradients, so no walk or reverse step of pass B reads global memory.
# compare.py with STAGE=3, then the Triton pass and the Gluon pass with STAGE 1, 2 and 3 side by side (B = 1, L = 8192),
# then ncu's source counters for STAGE 3 (B = 1, L = 2048).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
STAGE=3 timeout 200 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage3.log 2>&1
echo "compare STAGE=3 exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage3.log
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:STAGE=1,chunked@LOCAL=gluon:STAGE=2,chunked@LOCAL=gluon:STAGE=3" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
b=chunked@LOCAL=gluon:STAGE=3; name=${b//[@=:]/-}; rep=$out/ncu-$name
timeout 100 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section WarpStateStats \
  --section SchedulerStats --section SourceCounters --section SpeedOfLight --section Occupancy \
  --section MemoryWorkloadAnalysis -o $rep python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-$name.log 2>&1
echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
ncu -i $rep.ncu-rep --page details > $out/ncu-$name-details.txt 2>&1
ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
python3 scripts/ncu_source_digest.py $rep-source.csv 30 > $out/digest-$name.txt 2>&1
rm -f $rep.ncu-rep $rep-source.csv
grep -E "Duration|Issued Warp|No Eligible|L1/TEX Hit" $out/ncu-$name-details.txt; head -12 $out/digest-$name.txt | cut -c1-160
