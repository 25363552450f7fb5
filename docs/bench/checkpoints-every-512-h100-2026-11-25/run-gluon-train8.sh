# the Gluon forward (and the opt-in Gluon backward) checked at the default chunk size (512), then fine-tuning with 8
# of 64 layers upgraded; run from the repository root:
#   OUT=dir bash docs/bench/checkpoints-every-512-h100-2026-11-25/run-gluon-train8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for backend in gluon gluon-bwd; do
  timeout 120 python3 scripts/check_scan_gpu.py --backend $backend --quick --json $out/check-$backend-ct512.json \
    > /tmp/check.log 2>&1
  echo "check $backend exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" /tmp/check.log | tail -4
  cat /tmp/check.log >> $out/check-gluon-ct512.log
done
timeout 400 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --chunk-size 512 \
  --json $out/train8-ct512.json > $out/train8-ct512.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train8-ct512.log
