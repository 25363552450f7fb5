# Fourth call: call 3 timed B = 8 in two processes, the chunked forward 2.2 ms faster but forward + backward 5.7 ms
# slower than with the sequential forward. Here in one process, each forward twice (auto's chunked forward as
# "triton" and as "fwd[DOT=tf32x3]:triton"; the sequential forward in the one-warp tiling auto gives it from B = 4,
# and in FWD_CONFIG's four-warp tiling, its choice at B = 1), at B = 1, 4 and 8, L = 8192, full precision.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 420 python3 scripts/bench_scan.py --no-step --float32 --full-precision --shapes 8x8192,1x8192,4x8192 \
  --backends "triton,fwd-seq[BV=8:UNROLL=1:num_warps=1]:triton,fwd[DOT=tf32x3]:triton,fwd-seq:triton" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench.log | tail -3
