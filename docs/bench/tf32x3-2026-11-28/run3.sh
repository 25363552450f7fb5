# Third call: what call 2 lost (its ninth output file was over the count that comes back; its B = 8 runs were cut at
# 60 s): the chunked forward in IEEE products on check_scan_gpu.py's cases (the float32 errors beside tf32x3's of
# call 2), and B = 8, L = 8192 at full precision, the largest batch auto gives the chunked forward, with "auto" and
# with the sequential forward.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 110 python3 scripts/check_scan_gpu.py --forward chunked --forward-config DOT=ieee \
  --json $out/check-ieee.json > $out/check-ieee.log 2>&1
echo "check ieee exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-ieee.log | tail -5
for fwd in auto sequential; do
  PALIMPSA_TRITON_FORWARD=$fwd timeout 150 python3 scripts/bench_scan.py --no-step --float32 --full-precision \
    --shapes 8x8192 --backends triton --json $out/bench-b8-$fwd.json > $out/bench-b8-$fwd.log 2>&1
  echo "bench B8 forward $fwd exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench-b8-$fwd.log | tail -1
done
