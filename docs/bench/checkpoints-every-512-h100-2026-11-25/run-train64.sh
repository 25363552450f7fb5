# fine-tuning with all 64 layers of the 2.7b shapes upgraded, checkpoints every 256 tokens (and the scan recomputed
# instead of kept) against every 512; run from the repository root:
#   OUT=dir bash docs/bench/checkpoints-every-512-h100-2026-11-25/run-train64.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for ct in 256 512; do
  extra=""; [ $ct = 256 ] && extra="--full-recompute"
  timeout 290 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --chunk-size $ct $extra \
    --json $out/train64-ct$ct.json > $out/train64-ct$ct.log 2>&1
  echo "ct $ct exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train64-ct$ct.log
done
