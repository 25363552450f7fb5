# First call (2026-11-27): the local pass with the pair starts of each block in a ring (RING: only the block's last
# pair walks from the block start, leaving the starts of the pairs between in two ring slots after the slab; 1.75
# recompute updates a token in pass B instead of 2.5). Float64 checks with the chunked backward forced and RING=1,
# then the local pass timed side by side: default, RING=1, RING=2 (the ring prefetched into L1 after the walk).
# Run from the repository root with .bench_deps beside it, on ef6d084 with ring.patch applied (git checkout ef6d084 &&
# git apply docs/bench/ring-2026-11-27/ring.patch): OUT=dir bash docs/bench/ring-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config RING=1 \
  --json $out/check-ring1.json > $out/check-ring1.log 2>&1
echo "check ring1 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-ring1.log | tail -4
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@RING=1,chunked@RING=2" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -6
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config RING=2 \
  --json $out/check-ring2.json > $out/check-ring2.log 2>&1
echo "check ring2 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-ring2.log | tail -4
