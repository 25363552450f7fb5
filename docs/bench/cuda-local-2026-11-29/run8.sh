# Eighth call: check_scan_gpu.py's float64 checks without the uncertainty output as `auto` dispatches (--quick), which
# now include three cases with the CUDA chunk walk forced (fp16, P = 32, P = 128; commit 67b8a30): the first GPU run
# of the first two, which `auto` then left to the Triton walk.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-local-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/check_scan_gpu.py --quick --without-uncertainty --json $out/check-auto.json \
  > $out/check-auto.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -cE " yes$" $out/check-auto.log
grep -E " NO$|Error|error|checks passed" $out/check-auto.log | head; sed -n '/chunk walks, per case/,$p' $out/check-auto.log | head -30
