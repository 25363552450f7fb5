# Seventh call (2026-11-27): a tenth of the Gluon pass's stall samples (call 3) wait on the loads of the walk to a
# segment (each token's first touch, ~470 cycles, in turn). PIPE (on by default) loads each token's inputs of the
# walks while the token before it is computed. Checks (compare.py), then the Triton pass, the Gluon pass with PIPE and
# without it, timed side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -v " 0.00e+00" $out/compare.log | tail -2
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon,chunked@LOCAL=gluon:PIPE=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
