# Ninth call (2026-11-28): STAGE 3 with PIPE (each walk token's inputs read from shared memory a token ahead) ran the
# local pass in 11.78 ms against the Triton pass's 12.22 in call 8. compare.py with both, then both side by side at
# B = 1 (L = 8192, 16384) and B = 2 (L = 8192: a split backward still; B = 4 runs the sequential one).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
STAGE=3 PIPE=1 timeout 100 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage3-pipe.log 2>&1
echo "compare STAGE=3 PIPE=1 exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage3-pipe.log
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192,1x16384,2x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:STAGE=3:PIPE=1" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench.log | tail -8
