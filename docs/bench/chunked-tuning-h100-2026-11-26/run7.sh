# Seventh H100 call (2026-11-26): with initial states in, the sequential forward keeps fused_recurrent.FWD_CONFIG
# (run6 timed the one-warp tiling with a state load hidden from Triton's analysis: 13.22 ms). Run from the
# repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,state:triton" \
  --json $out/bench-state.json > $out/bench-state.log 2>&1
echo "bench state exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-state.log
