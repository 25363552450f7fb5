# Fifth call: how much of a fine-tuning step is GPU work, now that a block's elementwise work is fused: one round each
# with 8 and with 64 layers upgraded and one more step of each model under the profiler (--profile: the step's summed
# kernel time against its wall time), then host against GPU time of one block's forward and backward
# (host-2026-11-29's host_phases.py, 8 layers: an upgraded block beside a plain one), on the Triton cache of call 1.
# Run from the repository root with .bench_deps and triton-cache.tgz beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --profile 6 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|steps|profile of|^  +[0-9.]+ ms" $out/train64.log | cut -c1-200
timeout 120 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --profile 6 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|steps|profile of|^  +[0-9.]+ ms" $out/train8.log | cut -c1-200
timeout 150 python3 docs/bench/host-2026-11-29/host_phases.py --layers 8 --top 0 > $out/phases8.log 2>&1
echo "phases exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/phases8.log | cut -c1-200 | head -12
