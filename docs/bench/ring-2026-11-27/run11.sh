# Eleventh call (2026-11-27): the committed defaults (KQ32 on) at every shape of the targets, as auto
# dispatches, side by side with SSD: B = 1 and 4, L = 2048, 8192 and 16384.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run11.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 560 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192,1x16384,4x2048,4x8192,4x16384 \
  --backends triton --json $out/bench-all.json > $out/bench-all.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +triton" $out/bench-all.log | tail -8
