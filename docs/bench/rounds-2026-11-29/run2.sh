# Second call: the full table of the shipped defaults (the chunked forward and backward as auto dispatches them on
# Hopper: CUDA walk, CUDA local passes, CUDA corrections) beside the original Triton path (the sequential Triton
# forward and backward, fwd-seq:sequential) and SSD, at B = 1 and 4, L = 2048, 8192 and 16384, in 3 interleaved
# rounds and from CUDA graphs, then the decoding step.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rounds-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 560 python3 scripts/bench_scan.py --backends chunked,fwd-seq:sequential --rounds 3 --graphs \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/bench.log | tail -34
