# Ninth H100 call (2026-11-26), the final code (the one-warp tiling with and without initial states): the float64
# checks as auto dispatches. Run from the repository root: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 100 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
