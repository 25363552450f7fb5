# Tenth H100 call (2026-11-26), the final code: at B = 2 (between the measured B = 1 and 4) the three forwards,
# the one auto takes (the one-warp sequential forward: 1280 programs, 9.7 an SM), FWD_CONFIG's and the chunk-parallel
# one. Run from the repository root with .bench_deps beside it:
#   OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run10.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 2x8192,2x2048 --backends "triton,fwd-seq:triton,fwd[]:triton" \
  --json $out/bench-b2.json > $out/bench-b2.log 2>&1
echo "bench b2 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b2.log
