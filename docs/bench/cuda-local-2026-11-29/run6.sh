# Sixth call: the second form of the CUDA local pass (a warp 8 channels of all 128 states, no barrier in the token
# loop, keys, values and gains widened to float32 in shared memory, dq and dk added two states at a time) checked
# against float64 and the Gluon pass, then timed beside it with its parts left out (CUDA_PROBE: 2 no dq/dk/decay-
# gradient butterflies or atomics, 4 walks of one token) and with one-state atomics (CUDA_VEC=0).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|failed" $out/check.log | head -40
b="chunked@LOCAL=cuda"
timeout 300 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 \
  --backends "$b,$b:CUDA_VEC=0,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,chunked@LOCAL=gluon" --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -20 $out/bench.log
