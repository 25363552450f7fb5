# fine-tuning throughput of the 2.7b shapes with 8 of 64 layers upgraded (TF32 allowed, so the backward is the
# chunk-parallel one), after run.sh in the same call;
# run from the repository root: OUT=dir bash docs/bench/chunked-bwd-slots-h100-2026-11-25/run-train.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train8.log
