# Fourteenth call: the CUDA forward local pass with its copies at fixed offsets (call 12's SASS spent about half of the stage
# loop's ~690 instructions on a generic loop's addressing): Triton's local pass, the mma.sync form, and the warpgroup form
# with 2 and 3 stages of inputs (fwd_parts.py), after check_scan_gpu.py --quick --without-uncertainty under auto.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run14.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
PALIMPSA_CUDA_FWD_LOCAL=auto timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty \
  > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|arn" $out/check_scan.log | head -20
timeout 200 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --cases bf16:1,bf16:4,mix:1 \
  --tilings="-,local_CUDA=1:wgmma=0,local_CUDA=1,local_CUDA=1:raws=3" > $out/parts.log 2>&1
echo "parts exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/parts.log | cut -c1-190 | tail -12
