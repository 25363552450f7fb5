# Sixth call: calls 1-3 found the same float32 forward errors (to three digits in every case) with the chunked
# forward's products in tf32x3 and in IEEE float32. Whether the check sees those products at all: the same cases
# with them in plain TF32 (a failure here is expected and is the point: TF32's 10-bit operands must show).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --forward chunked --forward-config DOT=tf32 \
  --json $out/check-tf32.json > $out/check-tf32.log 2>&1
echo "check tf32 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-tf32.log | tail -12
