# Second call (2026-11-27): call 1's B = 1 timing ran out of time (four variants compiled), and at B = 4 the
# sequential backward was slower with REVERSE (68.30 ms forward + backward against 58.78). The local pass at B = 1,
# L = 8192 with the walks (0), the default bound (4) and every block undone (1000), with its launches timed.
# The code: c2c8931 with reverse-separate.patch applied (git apply docs/bench/reverse-2026-11-27/...).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@REVERSE=0,chunked,chunked@REVERSE=1000" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
