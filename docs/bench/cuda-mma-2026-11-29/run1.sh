# First call: the CUDA local pass with tensor-core state updates (mma.m16n8k8 tf32: pass A a segment in two
# products a state tile, pass B each token from its sub-block's start in one) checked against float64 and the Gluon
# pass, then timed beside the Gluon pass with its parts left out (CUDA_PROBE: 2 no dq/dk/decay-gradient butterflies
# or atomics, 4 no per-token walks, 8 no pass A).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|failed" $out/check.log | head -40
b="chunked@LOCAL=cuda"
timeout 300 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 \
  --backends "$b,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,$b:CUDA_PROBE=8,chunked@LOCAL=gluon" --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -22 $out/bench.log
