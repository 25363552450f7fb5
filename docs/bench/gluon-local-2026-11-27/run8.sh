# Eighth call (2026-11-27): the committed Gluon local pass (call 2's kernel with its segments in gluon_local._segment,
# PIPE off by default after call 7): the float64 checks of compare.py, then the Triton pass as dispatched and the Gluon
# pass (bwd_config LOCAL="gluon") timed side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -v " 0.00e+00" $out/compare.log | tail -2
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
