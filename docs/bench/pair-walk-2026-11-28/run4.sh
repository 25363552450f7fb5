# Fourth call: the shipped defaults beside SSD and the sequential Triton path in one run, at B = 1 and 4 and L = 2k,
# 8k and 16k (bench_scan.py's full table), with the decoding step: the figures of docs/kernels.md's "Speed".
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 560 python3 scripts/bench_scan.py --backends "triton,fwd-seq:sequential" --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -28 $out/bench.log
