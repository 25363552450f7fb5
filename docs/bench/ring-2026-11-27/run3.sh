# Third call (2026-11-27): KQ32 on by default in the chunk walk and the local pass (call 2). The scan side by side
# with the old default (both off) at B = 1; at B = 4, where auto takes the sequential backward, that backward with
# KQ32 too and the chunk-parallel backward forced with 1 and 2 splits.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "fwd[walk_KQ32=0]:chunked@KQ32=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -3
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 4x8192 --breakdown \
  --backends "chunked,sequential@KQ32=1,chunked@NSPLIT=1,chunked@NSPLIT=2" --json $out/bench-b4.json \
  > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b4.log | tail -5
