# Seventh call (2026-11-28): calls 3 and 6 ran STAGE 1 whatever STAGE they asked for (chunked_bwd passed
# bool(STAGE) to the launch), so STAGE 2 and 3 were not yet measured. Fixed; compare.py with STAGE=3 (the bf16 case,
# whose decays are bf16, runs STAGE 2), then the Triton pass and the Gluon pass with STAGE 1, 2 and 3 side by side at
# B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
STAGE=3 timeout 150 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage3.log 2>&1
echo "compare STAGE=3 exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage3.log
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:STAGE=1,chunked@LOCAL=gluon:STAGE=2,chunked@LOCAL=gluon:STAGE=3" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
