# Fourth call: the CUDA chunk walk as shipped (kernels/cuda_walk.py, taken by `auto` on compute capability 9.x):
# check_scan_gpu.py's float64 checks without the uncertainty output (with it the Triton walk runs), first with the
# chunked forward forced in every case at 16k tokens, then as `auto` dispatches (--quick); then bench_scan.py with
# the CUDA walk and with the Triton walk (fwd[walk_CUDA=0]) beside SSD.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/check_scan_gpu.py --without-uncertainty --forward chunked --backend triton-chunked \
  --json $out/check-forced.json > $out/check-forced.log 2>&1
echo "check forced exit $? at $(( $(date +%s) - start )) s"; grep -cE " yes$" $out/check-forced.log; grep -E " NO$|Error|error" $out/check-forced.log | head; sed -n '/chunk walks, per case/,/local passes/p' $out/check-forced.log
timeout 120 python3 scripts/check_scan_gpu.py --quick --without-uncertainty --json $out/check-auto.json \
  > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -cE " yes$" $out/check-auto.log; grep -E " NO$|Error|error" $out/check-auto.log | head; sed -n '/chunk walks, per case/,/local passes/p' $out/check-auto.log
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192,1x16384,4x8192 \
  --backends "triton,fwd[walk_CUDA=0]:triton" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -24 $out/bench.log
