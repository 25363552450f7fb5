# Seventh call: at full precision the backward walks whole sequences at 8 programs an SM, so at B = 1 its 1280 work
# items (2.7b shapes) take two rounds over 1056 resident programs (640 programs of two items each). The preset's keys
# (SEG 2, 168 registers, 12 programs an SM, rescaled walks; until now for split launches only) hold all 1280 in one
# round. Timed against auto (8 an SM) at B = 1, 2 and 3, L = 8192, and B = 1, L = 2048, full precision.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_scan.py --no-step --float32 --full-precision --shapes 1x8192,2x8192,3x8192,1x2048 \
  --backends "triton,chunked@SPLIT=0:SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench.log | tail -4
