# First call: START_AHEAD (new, off by default) copies each pass B segment's start state into shared memory one
# segment ahead (cp.async into the slot its last pair has read), instead of loading it from the slab when the segment
# starts (~300 cycles a segment in ncu's stall samples). Checked against float64 as dispatched with it on (split
# launches at small batches, whole walks where unsplit), then timed against the defaults: bf16 B = 1 (with the local
# pass's breakdown, and whole walks at B = 1 for bf16, SPLIT=0, which take the 12-an-SM keys), bf16 B = 4 (whole
# walks at 8 an SM), float32 with TF32 at B = 1.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/start-ahead-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --without-uncertainty \
  --chunked-config START_AHEAD=1 --json $out/check-ahead.json > $out/check-ahead.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror|gluon" $out/check-ahead.log | tail -6
timeout 150 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked,chunked@START_AHEAD=1,chunked@SPLIT=0" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local|ms" $out/bench-b1.log | tail -14
timeout 100 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "chunked,chunked@START_AHEAD=1" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench-b4.log | tail -3
left=$(( 520 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --breakdown --float32 --shapes 1x8192 \
  --backends "chunked,chunked@START_AHEAD=1" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local" $out/bench-f32.log | tail -8
