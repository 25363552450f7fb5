# First call (2026-11-27): the Gluon local pass (kernels/gluon_local.py, bwd_config LOCAL="gluon") against the Triton
# one: gradients against float64 and the Triton pass (compare.py), then the local pass timed side by side at B = 1,
# L = 8192 with SEG = 4 (the default: a block's second half walked twice), 2 and 8.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; tail -3 $out/compare.log
timeout 320 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:SEG=4,chunked@LOCAL=gluon:SEG=2,chunked@LOCAL=gluon:SEG=8" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
