# both Triton backwards' float64 checks at the default chunk size (512), then the scan at B = 1 and 4 with
# checkpoints every 512 and every 256 tokens, against SSD; run from the repository root:
#   OUT=dir bash docs/bench/checkpoints-every-512-h100-2026-11-25/run-scan.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for backend in triton-chunked triton-sequential; do
  timeout 100 python3 scripts/check_scan_gpu.py --backend $backend --quick --json $out/check-$backend-ct512.json \
    > /tmp/check.log 2>&1
  echo "check $backend exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" /tmp/check.log | tail -4
  cat /tmp/check.log >> $out/check-ct512.log
done
for ct in 512 256; do
  timeout 240 python3 scripts/bench_scan.py --no-step --backends chunked,sequential --shapes 1x8192,4x8192,1x2048 \
    --chunk-size $ct --json $out/bench-ct$ct.json > $out/bench-ct$ct.log 2>&1
  echo "bench ct $ct exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +(chunked|sequential) " $out/bench-ct$ct.log
done
