# First call: the Gluon local pass walking whole sequences (WHOLE, new: where nothing splits, it carries the adjoints
# across a sequence's chunks itself, so no carry or corrections follow), checked against float64 everywhere it can
# run (NSPLIT=1 forces one split in every case), then the defaults (split where the check's shapes split, whole
# where they do not; the final build of docs/bench/rescaled-walk-2026-11-28, never timed or checked on the GPU with
# its unscaled reverse step), then the preset's keys against the Triton pass (compare.py), and B = 4, L = 8192,
# where nothing splits: WHOLE against the sequential Triton backward (WHOLE=0, as before).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --chunked-config NSPLIT=1 --without-uncertainty \
  --json $out/check-whole.json > $out/check-whole.log 2>&1
echo "check whole exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror|gluon" $out/check-whole.log | tail -10
timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty \
  --json $out/check-default.json > $out/check-default.log 2>&1
echo "check default exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror|gluon" $out/check-default.log | tail -10
SEG=2 MAXNREG=168 PROGRAMS=12 STAGE=3 PIPE=1 L2PF=4 WALK_RESCALE=1 WIDEN=0 timeout 100 \
  python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-preset.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-preset.log; grep -E "FAIL|runs|rror" $out/compare-preset.log | tail -3
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "chunked,chunked@WHOLE=0" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench B4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|chunked.* 8192 \||local" $out/bench-b4.log | tail -6
