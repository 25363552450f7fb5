# First call: the CUDA C++ chunk walk (walk_cuda.py) checked against the Triton walk and float64, then the forward
# with each walk timed in interleaved rounds (B = 1 and 4, L = 8192, bf16 and float32), then ncu's scheduler and
# warp-state sections for both walks at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
walk=docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py
python3 -c "import torch; print('cuda', torch.version.cuda)" >> $out/machine.txt
timeout 300 python3 $walk --rounds 5 > $out/walk.log 2>&1
echo "walk exit $? at $(( $(date +%s) - start )) s"; grep -v "^$" $out/walk.log | tail -30
timeout 150 ncu --clock-control none -k regex:"palimpsa_walk_cuda|palimpsa_fwd_kernel" -c 3 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
  python3 $walk --profile --shapes 1x8192 --variants bt8=8:2,bt4=4:2 > $out/ncu.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
grep -E "palimpsa_|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Occ|Duration" $out/ncu.txt | head -40
