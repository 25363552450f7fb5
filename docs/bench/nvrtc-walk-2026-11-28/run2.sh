# Second call: walk_cuda.py's second version (one barrier a block, dynamic shared memory, two tokens an iteration
# sharing one butterfly) in four variants (BT 8 and 16, one token an iteration, 32-channel CTAs), checked and timed
# against the Triton walk as in call 1, then ncu's stall reasons per issued instruction for the Triton walk and two
# of the variants at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
walk=docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py
python3 -c "import torch; print('cuda', torch.version.cuda)" >> $out/machine.txt
timeout 300 python3 $walk --rounds 5 --variants bt8=8:2:1:64,bt16=16:2:1:64,single=8:2:0:64,cw32=16:4:1:32 > $out/walk.log 2>&1
echo "walk exit $? at $(( $(date +%s) - start )) s"; grep -v "^$" $out/walk.log | grep -E "forward|e-0[0-3]|nan|False" | tail -40
timeout 200 ncu --clock-control none -k regex:"palimpsa_walk_cuda|palimpsa_fwd_kernel" -c 3 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active" \
  python3 $walk --profile --shapes 1x8192 --variants bt16=16:2:1:64,cw32=16:4:1:32 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
python3 docs/bench/nvrtc-walk-2026-11-28/ncu_stalls.py $out/ncu.txt
