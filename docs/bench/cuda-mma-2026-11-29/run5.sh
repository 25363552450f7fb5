# Fifth call: one raw buffer (the next segment's copies asked for right after a segment is widened), float32 inputs
# where TF32 is allowed, and LOCAL "auto" taking the CUDA pass (4 to 80 work items an SM). check_local.py with a
# float32 case; check_scan_gpu.py --quick --without-uncertainty as auto dispatches; bench_scan.py at B = 1 and 16
# and L = 4096 (4.8 work items an SM), and in float32 with TF32.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed|f32" $out/check.log | head -30
grep -E "cuda vs" $out/check.log | sort -k5 -g | tail -2
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|local pass" $out/check_scan.log | head -30
b="chunked@LOCAL=cuda"
timeout 150 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,1x4096,16x8192 \
  --backends "$b,triton,chunked@LOCAL=gluon" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -16 $out/bench.log
timeout 100 python3 scripts/bench_scan.py --no-step --float32 --shapes 1x8192 \
  --backends "triton,chunked@LOCAL=gluon" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/bench-f32.log
