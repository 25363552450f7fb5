# First call: float32 inputs at full-precision matrix products (the trainer's default, train.tf32 false), where
# "auto" runs the sequential forward and the Gluon pass's whole walks because the chunk-parallel kernels' IEEE
# products (FMA form) cost what their parallelism saves. tf32x3 (three TF32 tensor-core products a product, about
# 22 bits of each operand) is the candidate: checked against float64 with the chunked forward and backward forced
# everywhere, both in tf32x3; then timed against auto at B = 1 (L = 2048, 8192, 16384) and B = 2, 3, 4 (L = 8192):
# auto; the chunked forward in tf32x3 before auto's backward; both chunked in tf32x3 (the backward splitting as
# chunked_bwd._splits chooses). Also checks the last commit of the previous session (2a70e7d, host code) as dispatched.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --forward chunked --chunked-config DOT=tf32x3 \
  --forward-config DOT=tf32x3 --without-uncertainty --json $out/check-x3.json > $out/check-x3.log 2>&1
echo "check x3 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-x3.log | tail -10
timeout 120 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -10
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --float32 --full-precision --breakdown \
  --shapes 1x8192,1x2048,1x16384,2x8192,3x8192,4x8192 \
  --backends "triton,fwd[DOT=tf32x3]:triton,fwd[DOT=tf32x3]:chunked@DOT=tf32x3" --json $out/bench-full.json \
  > $out/bench-full.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|\||local|correct|carry" $out/bench-full.log | tail -40
