# Ninth call (2026-11-27): call 8's ncu found the corrections at 12.5% occupancy, two 4-warp programs an SM, held
# there by their 200 registers and 86 KB of shared memory (D_M, D_I in both operand layouts, 64 KB, and the
# pipeline's buffers). One pipeline stage (74 KB) under a register cap of 160 or 168 (no spills offline) fits three.
# Timed side by side at B = 1, L = 8192 (correct_stages, correct_maxnreg: launch options of the corrections).
# Run from the repository root with .bench_deps beside it, with correct-options.patch applied (git apply
# docs/bench/ring-2026-11-27/correct-options.patch; not kept): OUT=dir bash docs/bench/ring-2026-11-27/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@correct_stages=1,chunked@correct_stages=1:correct_maxnreg=160,chunked@correct_stages=1:correct_maxnreg=168,chunked@correct_stages=2:correct_maxnreg=160" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|correct " $out/bench-b1.log | tail -7
