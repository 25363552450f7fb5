# Seventh call: the second form with the reverse step's sums over a lane's elements in four chains a channel instead
# of one chain of 64 FFMAs (the decay gradient's) and two of 16: checked (two cases) and timed beside the Gluon pass.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick --cases 1,2 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|failed" $out/check.log | head -20
b="chunked@LOCAL=cuda"
timeout 200 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b,$b:CUDA_PROBE=2,chunked@LOCAL=gluon" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -9 $out/bench.log
