# Second call: the CUDA local pass with 4 channels a lane (16 warps of 128 registers, CUDA_CH=4) checked against
# float64 and the Gluon pass (three cases), then both lane widths timed beside the Gluon pass.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick --lane-channels 4 --cases 1,2,4 \
  > $out/check4.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|local passes|failed" $out/check4.log | head -40
timeout 250 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 \
  --backends "chunked@LOCAL=cuda:CUDA_CH=8,chunked@LOCAL=cuda:CUDA_CH=4,chunked@LOCAL=gluon" --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -14 $out/bench.log
