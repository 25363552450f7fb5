# Fourth call: call 2's form (two state slots, each warp's dq, dk added by its own vector atomics; call 3's sums over
# the CTA's warps in shared memory took a slot and lost) with the next segment's start state asked for in L2 while a
# segment runs. Checked against float64 and the Gluon pass, timed beside it at B = 1 with parts left out, then at
# B = 4 and 8 and L = 2048 and 16384 beside the dispatched path ("triton": whole Gluon walks at B = 4 and 8).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -60
grep -E "cuda vs" $out/check.log | sort -k5 -g | tail -2
b="chunked@LOCAL=cuda"
timeout 150 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,$b:CUDA_PROBE=8,chunked@LOCAL=gluon" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -9 $out/bench-b1.log
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192,8x8192,1x2048,1x16384 \
  --backends "$b,triton" --json $out/bench-more.json > $out/bench-more.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -10 $out/bench-more.log
