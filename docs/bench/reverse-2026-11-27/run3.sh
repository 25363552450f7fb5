# Third call (2026-11-27): call 2 timed the local pass at B = 1, L = 8192 at 12.21 ms walking every block, 11.26
# undoing every block and 18.31 with the default bound, where the two kinds of block alternate: the two copies of the
# reverse steps (one per kind) taken in turn by an SM's programs. Now one copy serves both (_undone_or_walked_pairs:
# the branch makes the pair's states only), and the block start that an undone block loads at its end is
# prefetched into L1. The same three at B = 1, and the sequential backward at B = 4 walking and at the bound.
# The code: c2c8931 with reverse.patch applied (git apply docs/bench/reverse-2026-11-27/...).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@REVERSE=0,chunked,chunked@REVERSE=1000" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@REVERSE=0,sequential" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log | tail -2
