# Fifth call (2026-11-27): call 4 found the chunked forward faster at B = 4 (9.34 ms against the sequential 10.69);
# the same comparison at B = 3 and 8, to place auto's threshold (chunked_fwd.PROGRAMS_PER_SM).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rescaled-2026-11-27/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 280 python3 scripts/bench_scan.py --no-step --shapes 3x8192,8x8192 --backends "fwd-seq[BV=8:TRANS=1:UNROLL=1:num_warps=1]:triton,fwd[]:triton" \
  --json $out/bench-b38.json > $out/bench-b38.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b38.log
