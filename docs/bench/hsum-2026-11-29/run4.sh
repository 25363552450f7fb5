# Fourth call: a token's dv, dbeta and decay-gradient sums across the warp done during the next token's reverse step
# (timing macro DEFER 1), so that their 8 dependent shuffles interleave with that step's independent arithmetic
# instead of ending each token. check_local.py's seven cases with DEFER=1; the local pass with and without it,
# interleaved (TSUB 6).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines DEFER=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -3
timeout 150 python3 docs/bench/peel-2026-11-29/time_tsub.py --tsubs 6 --defines ",DEFER=1" > $out/time_defer.log 2>&1
echo "time_defer exit $? at $(( $(date +%s) - start )) s"; tail -8 $out/time_defer.log
