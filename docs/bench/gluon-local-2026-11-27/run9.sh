# Ninth call (2026-11-27): with the Gluon pass's L1 shrunk by its shared memory (call 5), the prefetch of the block
# before, issued a whole block ahead, may leave L1 before its first use (call 3: the walk's first loads waited ~470
# cycles). PREFETCH=2 issues it before the block's last segment instead (half a block ahead at SEG = 4). The Triton
# pass and the Gluon pass with each, side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon,chunked@LOCAL=gluon:PREFETCH=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -6
