# Fourth call (2026-11-27): call 3's source counters put 10% of the Gluon pass's stall samples on one instruction,
# the first use of a value loaded in the walk that takes a segment's block start to its first token (a loop: each
# token's loads waited ~470 cycles in turn). The segments are now unrolled (gluon_local._segment, NSEG copies), so
# each walk is one straight run whose loads ptxas issues together. Checks and timings as call 2, and SEG = 4 without
# the prefetches.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -v " 0.00e+00" $out/compare.log | tail -3
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:SEG=4,chunked@LOCAL=gluon:SEG=2,chunked@LOCAL=gluon:SEG=4:PREFETCH=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
