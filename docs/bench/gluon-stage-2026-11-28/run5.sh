# Fifth call (2026-11-28): the committed kernels at B = 4, L = 8192 (SSD no longer launch-bound, the floor
# targets), the Triton local pass as dispatched beside the staged Gluon pass, and B = 1 again in the same run.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 500 python3 scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local |floor|^ +chunked" $out/bench.log | tail -12
