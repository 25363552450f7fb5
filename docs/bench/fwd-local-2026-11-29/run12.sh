# Twelfth call: the CUDA forward local pass's products as warpgroup products (wgmma, sm_90a; call 11 found the
# mma.sync form bound by its instruction count and tensor pipe at 0.223 ms): check_scan_gpu.py --quick
# --without-uncertainty with it under auto, then fwd_parts.py: Triton's local pass, the mma.sync form and the wgmma
# form (checkpoints against Triton's, all timed), then ncu's stall reasons on the wgmma form.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run12.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
export PALIMPSA_CUDA_FWD_LOCAL=auto
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|local|arn" $out/check_scan.log | head -20
unset PALIMPSA_CUDA_FWD_LOCAL
timeout 150 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --tilings="-,local_CUDA=1:wgmma=0,local_CUDA=1" \
  > $out/parts.log 2>&1
echo "parts exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/parts.log | tail -12
p=docs/bench/fwd-local-2026-11-29/ncu_fwd.py
timeout 100 ncu --clock-control none -k regex:palimpsa_fwd_local_cuda -c 1 --section SpeedOfLight \
  --section Occupancy --section SchedulerStats --section ComputeWorkloadAnalysis \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:smsp__inst_executed_pipe_.*sum$,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  python3 $p 1 8192 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
python3 docs/bench/nvrtc-walk-2026-11-28/ncu_stalls.py $out/ncu.txt | grep -v "pipe_.*0.0$"
grep -E "Duration|DRAM Through|Compute \(SM\)|Achieved Occ|Registers|Issued Warp|No Eligible|highest" $out/ncu.txt | sed 's/  */ /g'
