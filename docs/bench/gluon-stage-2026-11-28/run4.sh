# Fourth call (2026-11-28): where the staged Gluon pass (STAGE=1, 13.30 ms against the Triton pass's 12.16) still
# waits: ncu's warp states, scheduler statistics and source counters (bench_scan.py --profile: B = 1, L = 2048),
# digested by scripts/ncu_source_digest.py, as gluon-local-2026-11-27's call 3 did for both passes before staging.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for b in chunked@LOCAL=gluon:STAGE=1; do
  name=${b//[@=:]/-}; rep=$out/ncu-$name
  timeout 150 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section SpeedOfLight --section Occupancy -o $rep \
    python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-$name.log 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
  ncu -i $rep.ncu-rep --page details > $out/ncu-$name-details.txt 2>&1
  ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
  python3 scripts/ncu_source_digest.py $rep-source.csv 30 > $out/digest-$name.txt 2>&1
  rm -f $rep.ncu-rep $rep-source.csv
  grep -E "Duration|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Achieved Occ" $out/ncu-$name-details.txt
  head -24 $out/digest-$name.txt
done
