# First call (2026-11-28): the Gluon local pass with each block's key and query rows copied to shared memory at the
# block's start in pass B (cp.async, bwd_config STAGE=1) instead of read through an L1 that the states' shared memory
# has shrunk (docs/bench/gluon-local-2026-11-27, call 5: L1 hit rate 24.5% against the Triton pass's 46.4%). The float64
# checks of compare.py without and with STAGE (the packed case split, so that it reaches the Gluon pass), then the
# Triton pass as dispatched and the Gluon pass without and with STAGE (SEG 4 and 2) side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for stage in 0 1; do
  STAGE=$stage timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage$stage.log 2>&1
  echo "compare STAGE=$stage exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage$stage.log
  grep varlen $out/compare-stage$stage.log | tail -3
done
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon,chunked@LOCAL=gluon:STAGE=1,chunked@LOCAL=gluon:STAGE=1:SEG=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -6
# the L1 hit rate and issue rate of the Gluon pass without and with STAGE (B = 1, L = 2048; as gluon-local's call 5)
for b in chunked@LOCAL=gluon chunked@LOCAL=gluon:STAGE=1; do
  name=${b//[@=:]/-}
  timeout 100 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section SpeedOfLight --section Occupancy \
    python3 scripts/bench_scan.py --profile --backends $b > $out/ncu-mem-$name.txt 2>&1
  echo "ncu $b exit $? at $(( $(date +%s) - start )) s"
  grep -E "Duration|L1/TEX Hit Rate|Issued Warp|Shared Memory Configuration Size|Dynamic Shared" $out/ncu-mem-$name.txt
done
