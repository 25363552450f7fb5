# One H100 call (2026-11-26): the chunk-parallel forward's float64 checks (forced everywhere, then as auto picks it),
# and the two Triton forwards side by side. Run from the repository root with the package importable, OUT set.
set -o pipefail
python3 scripts/check_scan_gpu.py --backend triton-chunked --forward chunked --quick \
  --json $OUT/check-chunked-fwd.json > $OUT/check-chunked-fwd.log 2>&1
python3 scripts/check_scan_gpu.py --quick --json $OUT/check-auto.json > $OUT/check-auto.log 2>&1
PALIMPSA_TRITON_FORWARD=chunked python3 scripts/bench_scan.py --no-step --backends fwd-seq:chunked,chunked \
  --shapes 1x8192,1x2048,4x8192 --json $OUT/bench-fwd.json > $OUT/bench-fwd.log 2>&1
