# Ninth call: the float64 checks again after the kernel's source gained the record's variant options (compiled out in
# the shipped kernel): check_scan_gpu.py without the uncertainty output, the chunked forward forced in every case.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/check_scan_gpu.py --without-uncertainty --forward chunked --backend triton-chunked \
  --json $out/check-forced.json > $out/check-forced.log 2>&1
echo "check forced exit $? at $(( $(date +%s) - start )) s"; grep -cE " yes$" $out/check-forced.log
grep -E " NO$|Error|error" $out/check-forced.log | head; sed -n '/chunk walks, per case/,/local passes/p' $out/check-forced.log
