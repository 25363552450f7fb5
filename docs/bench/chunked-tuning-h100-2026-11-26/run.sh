# One H100 call (2026-11-26): the float64 checks as auto dispatches (after the refactors of a03415c), then tilings of
# the two chunk-parallel passes at B = 1, L = 8192 beside SSD: the backward's local pass with two channels a program
# under a register cap (more programs per SM), and the forward's chunk walk with one or two warps a program.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
bwd="chunked,chunked@BV=2:PROGRAMS_PER_SM=13:maxnreg=152,chunked@BV=2:PROGRAMS_PER_SM=13:maxnreg=152:NSPLIT=4"
bwd="$bwd,chunked@BV=2:PROGRAMS_PER_SM=8,chunked@BV=4:PROGRAMS_PER_SM=10:maxnreg=200"
walk="fwd[walk_BV=4:walk_warps=1]:chunked,fwd[walk_BV=8:walk_warps=1]:chunked,fwd[walk_BV=8:walk_warps=2]:chunked"
walk="$walk,fwd[walk_BV=16:walk_warps=2]:chunked,fwd[walk_BV=8:walk_warps=1:walk_UNROLL=1]:chunked"
for group in bwd walk; do
  timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --backends "${!group}" \
    --json $out/bench-$group.json > $out/bench-$group.log 2>&1
  echo "bench $group exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|^ .* 1 +8192 \|" $out/bench-$group.log
done
