# Fourth call (2026-11-27): call 3 with one copy of the reverse steps still found the default bound slower than
# walking every block (local pass 12.88 ms against 12.07; 10.95 undoing every block). There the walked pairs loaded
# their inputs before the walk; now after it, as _walked_pairs does. A bound no block meets (1e-4) times the walks of
# the shared code alone. B = 1, L = 8192, then the sequential backward at B = 4.
# The code: c2c8931 with reverse-walk-loads-after.patch applied (git apply docs/bench/reverse-2026-11-27/...).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 330 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@REVERSE=0,chunked@REVERSE=0.0001,chunked,chunked@REVERSE=1000" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@REVERSE=0,sequential" --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log | tail -2
