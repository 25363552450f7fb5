# First call: the CUDA local pass (kernels/cuda_local.py) checked against float64 and the Gluon pass
# (check_local.py), then timed beside the Gluon pass and SSD (bench_scan.py --breakdown).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|local passes|failed" $out/check.log | head -60
timeout 200 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 \
  --backends "chunked@LOCAL=cuda,chunked@LOCAL=gluon" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -40 $out/bench.log
