# Sixth call: the shipped defaults as committed (LEANA 1): bench_scan.py at B = 1 and 4, L = 8192, the chunked path
# against SSD in one run, with the backward's launches timed (--breakdown).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 --backends chunked \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "B=[14] L=8192|floor" $out/bench.log | head -12
