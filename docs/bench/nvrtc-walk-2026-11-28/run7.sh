# Seventh call: call 6's first part again, now with the Triton walk as the baseline (walk_cuda.py turns the chunked
# forward's own CUDA walk off): 0 to 3 of a lane's 4 groups of states sharing reciprocals, checked and timed.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
walk=docs/bench/nvrtc-walk-2026-11-28/walk_cuda.py
timeout 300 python3 $walk --rounds 5 --variants pr0=16:2:1:64:0,pr1=16:2:1:64:1,pr2=16:2:1:64:2,pr3=16:2:1:64:3 \
  > $out/walk.log 2>&1
echo "walk exit $? at $(( $(date +%s) - start )) s"; grep -E "forward|NO|nan|False" $out/walk.log | tail -20
