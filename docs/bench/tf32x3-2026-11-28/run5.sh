# Fifth call: the split backward at full precision lost in call 1 on its tf32x3 corrections (8.80 ms at 16 channels
# and 8 warps, against 1.25 in TF32 with bf16 inputs). Other tilings of tf32x3 corrections that compile without spills under Triton
# 3.6 (32 channels, 8 warps), against TF32 ones for scale, B = 1, L = 8192, full precision, with the breakdown.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_scan.py --no-step --float32 --full-precision --shapes 1x8192 --breakdown \
  --backends "triton,chunked@DOT=tf32x3,chunked@DOT=tf32x3:BP=32:correct_warps=8,chunked@DOT=tf32" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local" $out/bench.log | tail -6
