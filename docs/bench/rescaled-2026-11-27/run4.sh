# Fourth call (2026-11-27): since the chunk walk got SCATTER and RESCALE, does the chunked forward now beat the
# sequential one at B = 2 and 4, where auto takes the sequential forward (chunked_fwd.PROGRAMS_PER_SM)? Both forwards
# timed side by side with the same (auto) backward.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rescaled-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 280 python3 scripts/bench_scan.py --no-step --shapes 2x8192,4x8192 --backends "triton,fwd[]:triton" \
  --json $out/bench-b24.json > $out/bench-b24.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b24.log
