# Seventh call: "auto" for float32 inputs at full precision now asks the chunk-parallel backward for no split (SPLIT
# 0: whole walks in the Gluon pass where it runs, the sequential kernel elsewhere; fused_recurrent.whole_by_default,
# written after call 6). The float64 checks as dispatched (check_scan_gpu.py --backend triton: the float32 cases at
# full precision, so whole walks there without the uncertainty output), then auto against the sequential backward
# (--float32 --full-precision, B = 1, L = 8192).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --backend triton --without-uncertainty \
  --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror|gluon|none" $out/check-auto.log | tail -10
left=$(( 380 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --float32 --full-precision --shapes 1x8192 \
  --backends "triton,sequential" --json $out/bench-f32-full.json > $out/bench-f32-full.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|\|" $out/bench-f32-full.log | tail -4
