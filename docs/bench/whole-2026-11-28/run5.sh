# Fifth call: B = 3, where the split choice now takes whole walks (chunked_bwd._splits with CORRECTIONS, written after
# call 3), at L = 2048 and 16384, which call 3 did not measure: the default (whole) against the split count chosen
# before (NSPLIT=4 at 2048, 32 at 16384), and at 8192 again (NSPLIT=16).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for spec in 3x2048:4 3x8192:16 3x16384:32; do
  shape=${spec%:*}; n=${spec#*:}
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_scan.py --no-step --shapes $shape --backends "chunked,chunked@NSPLIT=$n" \
    --json $out/bench-$shape.json > $out/bench-$shape.log 2>&1
  echo "bench $shape exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench-$shape.log | tail -2
done
