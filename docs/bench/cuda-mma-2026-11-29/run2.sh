# Second call: after call 1's fix (dq, dk's scratch addressed a tile pair 256 floats apart instead of 128: wrong dq,
# dk and an illegal address), with each segment's copies asked for while the one before it runs (two raw buffers)
# and the slab holding the checkpoint too. Checked against float64 and the Gluon pass, then timed beside it with
# dq, dk summed over 2, 1 or 0 butterfly levels before their atomics (CUDA_DQK) and with parts left out.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|failed" $out/check.log | head -60
b="chunked@LOCAL=cuda"
timeout 300 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 \
  --backends "$b,$b:CUDA_DQK=1,$b:CUDA_DQK=0,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,$b:CUDA_PROBE=8,chunked@LOCAL=gluon" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -24 $out/bench.log
