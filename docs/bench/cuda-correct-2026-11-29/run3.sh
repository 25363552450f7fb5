# Third call: the shipped defaults as committed. LOCAL "auto" takes the CUDA local pass for keys in their own dtype
# too, CORRECT "auto" the CUDA corrections: check_scan_gpu.py --quick --without-uncertainty as auto dispatches (each
# case's local pass and corrections listed), then fine-tuning with all 64 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-correct-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 170 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed" $out/check_scan.log | head -20
grep -A40 "local passes and corrections" $out/check_scan.log | grep -c "cuda corrections"
left=$(( 400 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|RUNS" $out/train64.log
