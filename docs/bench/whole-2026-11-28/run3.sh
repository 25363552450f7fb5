# Third call (same machine): where the sequences split (B = 2 and 3 at 2.7b shapes; 2 splits at L = 2048, 16 at 8192 and
# 16 at 16384), the split (then the default: local pass, carry, corrections) against whole walks forced by NSPLIT=1
# (fewer, longer work items, nothing after).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 2x2048,2x8192,3x8192,2x16384 \
  --backends "chunked,chunked@NSPLIT=1" --json $out/bench-b23.json > $out/bench-b23.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|chunked.* \|" $out/bench-b23.log | tail -12
