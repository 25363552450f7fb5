# Third call: dq, dk and the decay gradient summed over the CTA's 8 warps in shared memory a sub-block (8 tokens)
# at a time before their atomics (CUDA_CTA_SUM, default 1: 64 four-state vector atomics a token and CTA instead of
# 512), which takes one state slot instead of two (the sub-block's start, read again from the slab). Checked
# against float64 and the Gluon pass, then timed beside it, with the per-warp atomics (CUDA_CTA_SUM=0) and with parts
# left out.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/cuda-local-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -60
grep -E "cuda vs" $out/check.log | sort -k5 -g | tail -3
b="chunked@LOCAL=cuda"
timeout 300 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192,1x2048,1x16384 \
  --backends "$b,$b:CUDA_CTA_SUM=0,$b:CUDA_PROBE=2,$b:CUDA_PROBE=4,chunked@LOCAL=gluon" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -30 $out/bench.log
