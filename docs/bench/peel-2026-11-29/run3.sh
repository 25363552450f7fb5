# Third call: run1.sh's checks and timings again, on the kernel with pass B's token factors computed once a segment
# by the stage (1 / A, A, the decay, the peel flags: one shared read a token) and each segment's start copied from the
# slab into the slot its predecessor no longer reads (cp.async) while that one finishes.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed|run:" $out/check.log | head -40
grep -E " vs " $out/check.log | sort -k6 -g | tail -3
timeout 120 python3 docs/bench/peel-2026-11-29/time_tsub.py --tsubs 0,6 > $out/time_tsub.log 2>&1
echo "time_tsub exit $? at $(( $(date +%s) - start )) s"; tail -20 $out/time_tsub.log
timeout 120 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked@CUDA_TSUB=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -14 $out/bench-b1.log
