# Fourth call: fewer dq, dk atomics in the CUDA local pass. Call 2 found that spreading them over addresses does not
# move the pass, so their number bounds it; CUDA_WG=2 (4) has the warps of a pair (quad) sum their dq, dk in shared
# memory, one barrier of the group a token, before one warp adds them: 2x (4x) fewer atomics. check_local.py's cases
# with it, then the local pass timed with each (B = 1, L = 8192, --breakdown).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-correct-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
b="chunked@LOCAL=cuda"
timeout 80 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b,$b:CUDA_WG=2,$b:CUDA_WG=4" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/bench-b1.log
PALIMPSA_CHUNKED_LOCAL=cuda timeout 70 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --wg 4 \
  --cases 0,2,5,6 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed|run:" $out/check.log | head
