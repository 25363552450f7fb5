# First call (2026-11-28, session 26): where the Gluon local pass's executed instructions go. ncu's per-instruction
# execution counts of the pass as it runs today (LOCAL=gluon, the default SEG 4, STAGE 3, PIPE; B = 1, L = 2048,
# float32 and bf16 inputs), summed by source function with executed_by_function.py from the profiled kernel's own
# cubin (each profile compiles into a fresh Triton cache).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
here=docs/bench/rescaled-walk-2026-11-28
for dt in f32 bf16; do
  flag=; [ $dt = f32 ] && flag=--float32
  rep=$out/ncu-$dt
  export TRITON_CACHE_DIR=$(mktemp -d)
  timeout 150 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section SourceCounters \
    --section WarpStateStats --section SchedulerStats --section SpeedOfLight -o $rep \
    python3 scripts/bench_scan.py --profile $flag --backends chunked@LOCAL=gluon > $out/ncu-$dt.log 2>&1
  echo "ncu $dt exit $? at $(( $(date +%s) - start )) s"
  ncu -i $rep.ncu-rep --page details > $out/ncu-$dt-details.txt 2>&1
  ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
  cubin=$(ls $TRITON_CACHE_DIR/*/palimpsa_gluon_local_kernel.cubin | head -1)
  cp $cubin $out/gluon-local-$dt.cubin
  python3 scripts/ncu_source_digest.py $rep-source.csv 30 > $out/digest-$dt.txt 2>&1
  python3 $here/executed_by_function.py $rep-source.csv $cubin --element-tokens 1342177280 --lines 60 \
    > $out/by-function-$dt.txt 2>&1
  gzip -c $rep-source.csv > $out/ncu-$dt-source.csv.gz
  rm -f $rep.ncu-rep $rep-source.csv
  grep -E "Duration|Issued Warp|No Eligible|Registers Per" $out/ncu-$dt-details.txt
  head -30 $out/by-function-$dt.txt
done
