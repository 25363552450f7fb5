# Third call (2026-11-27): where the 2.7 ms of the recompute slab go (the second call's PROBE=2 and PROBE=8 both
# took it, because without the slab's stores the compiler drops pass A). PROBE bits now: 2 masks the slab's stores
# off by a condition the compiler cannot know false (pass A still computed), 8 leaves out pass A, 32 has pass B
# start every block at the checkpoint (a hit) instead of the slab. And the slab stored streaming (st.global.cs,
# evict first in L2), its loads at L1's first eviction priority.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-atomics-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PROBE=8,chunked@PROBE=34,chunked@PROBE=32,chunked@PROBE=2,chunked@SLAB_STORE=cs,chunked@SLAB_STORE=cs:SLAB_LOAD=evict_first" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -20
