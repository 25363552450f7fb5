# Eighth call: the defaults as committed (the forward's local pass SUFFIX 1, the backward local pass's BULKA 1):
# check_scan_gpu.py --quick --without-uncertainty as auto dispatches; bench_scan.py at B = 1 and 4, L = 8192 against
# SSD in one run (--breakdown); fine-tuning with 8 layers upgraded (bench_train.py --rounds 2).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed" $out/check_scan.log | head -20
timeout 170 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 --backends chunked \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "B=[14] L=8192|floor" $out/bench.log | head -12
left=$(( 540 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log | cut -c1-250
