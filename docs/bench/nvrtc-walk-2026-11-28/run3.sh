# Third call: one reciprocal shared by a lane's two channels on 2 or 4 of its 4 groups of states (`pr2`, `pr4`), and
# the keys squared in the walk instead of staged (`kkc`), each against `bt16` (call 2's fastest) and the Triton
# walk, checked and timed as in call 2, then ncu's stall reasons for the Triton walk and `pr2`, `pr4`
# at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
walk=docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py
python3 -c "import torch; print('cuda', torch.version.cuda)" >> $out/machine.txt
timeout 300 python3 $walk --rounds 5 --variants bt16=16:2:1:64,pr2=16:2:1:64:2,pr4=16:2:1:64:4,kkc=16:2:1:64:0:1,pr2kkc=16:2:1:64:2:1 > $out/walk.log 2>&1
echo "walk exit $? at $(( $(date +%s) - start )) s"; grep -v "^$" $out/walk.log | grep -E "forward|e-0[0-3]|nan|False" | tail -40
timeout 200 ncu --clock-control none -k regex:"palimpsa_walk_cuda|palimpsa_fwd_kernel" -c 3 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active" \
  python3 $walk --profile --shapes 1x8192 --variants pr2=16:2:1:64:2,pr4=16:2:1:64:4 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
python3 docs/bench/nvrtc-walk-2026-11-28/ncu_stalls.py $out/ncu.txt
