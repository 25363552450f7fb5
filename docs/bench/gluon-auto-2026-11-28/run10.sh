# Tenth call: with float32 inputs (what fine-tuning feeds the scan) the corrections take 1.92-1.93 ms against
# 1.26 in bf16 (call 7), and their tiling was only ever tuned in bf16. Their block of channels (BP, 32 by default
# under TF32), warps (4) and tokens (BT, 16) timed in float32, and L2PF 6 (pass A's prefetches to L2 as well).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run10.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 290 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --float32 \
  --backends "chunked,chunked@BP=64,chunked@BP=16,chunked@correct_warps=8,chunked@BT=32,chunked@L2PF=6" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -8
