# Fifth call (2026-11-27): undoing whole blocks lost wherever undone and walked blocks mix (calls 1-4), so REVERSE
# now undoes only each block's last pair, two updates from the block's end state in the slab, instead of its walk
# of 6 tokens (where the pair's two log decays sum to at most 4; fused_recurrent._undone_or_walked_pair), with one
# copy of the reverse steps for both kinds of pair. At B = 1, L = 8192: walking (0), the default bound and every
# such pair undone (1000); the sequential backward at B = 4; float64 checks as auto dispatches.
# The code: c2c8931 with reverse-last-pair.patch applied (git apply docs/bench/reverse-2026-11-27/...).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@REVERSE=0,chunked,chunked@REVERSE=1000" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@REVERSE=0,sequential" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log | tail -2
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -3
