# Third call (2026-11-28): call 2 found fine-tuning slower with the Gluon local pass (0.85x / 0.50x against the
# Triton pass's 0.88x / 0.51x), where the scan takes float32 inputs. Both local passes timed on float32 inputs
# (bench_scan.py --float32, TF32 as in fine-tuning) and bf16 side by side; then ncu on the Gluon pass (STAGE 3 +
# PIPE) with float32 and bf16 inputs (B = 1, L = 2048), digested as docs/bench/gluon-stage-2026-11-28's call 4.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run3.sh
# (The calls ran while LOCAL defaulted to "auto"; it defaults to "triton" again since call 4, so the commands
# below name LOCAL=auto where the call ran the default: the same kernels.)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/bench_scan.py --no-step --float32 --shapes 1x8192 --breakdown \
  --backends "chunked@LOCAL=auto,chunked@LOCAL=triton" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-f32.log | tail -4
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@LOCAL=auto,chunked@LOCAL=triton" --json $out/bench-bf16.json > $out/bench-bf16.log 2>&1
echo "bench bf16 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-bf16.log | tail -4
for dt in f32 bf16; do
  flag=; [ $dt = f32 ] && flag=--float32
  rep=$out/ncu-$dt
  timeout 120 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section SpeedOfLight --section Occupancy \
    --section MemoryWorkloadAnalysis -o $rep python3 scripts/bench_scan.py --profile $flag --backends chunked@LOCAL=auto \
    > $out/ncu-$dt.log 2>&1
  echo "ncu $dt exit $? at $(( $(date +%s) - start )) s"
  ncu -i $rep.ncu-rep --page details > $out/ncu-$dt-details.txt 2>&1
  ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
  python3 scripts/ncu_source_digest.py $rep-source.csv 30 > $out/digest-$dt.txt 2>&1
  rm -f $rep.ncu-rep $rep-source.csv
  grep -E "Duration|Issued Warp|No Eligible|Registers Per|L1/TEX Hit|Achieved Occ" $out/ncu-$dt-details.txt
  head -16 $out/digest-$dt.txt
done
