# Ninth call: the packed-sequence case of check_local.py again, after packed sequences launch the longest sequence's
# chunks (commit 83f2b23) instead of the batch's.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick --cases 2 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|cuda vs|local passes|failed" $out/check.log
