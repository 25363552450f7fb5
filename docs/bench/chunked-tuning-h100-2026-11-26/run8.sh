# Eighth H100 call (2026-11-26): with initial states in at B = 4, the four-warp tiling (run7: 13.69 ms) against the
# one-warp one with the state's load fixing its layout (TRANS True and False). Run from the repository root with
# .bench_deps beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
b="state:triton,state:fwd-seq[BV=8:num_warps=1:UNROLL=1]:triton,state:fwd-seq[BV=8:num_warps=1:UNROLL=1:TRANS=0]:triton"
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,$b" \
  --json $out/bench-state.json > $out/bench-state.log 2>&1
echo "bench state exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-state.log
