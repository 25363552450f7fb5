# Seventh call: call 6 again after the CUDA local pass takes keys and queries in their own dtype (fine-tuning feeds
# the scan float32 values, gains and output gradients with bf16 keys and queries, which call 6's kernel refused, so
# the Gluon pass's whole walks ran): 64 layers upgraded, then 8.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for n in 64 8; do
  left=$(( 215 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|LOCAL_RUNS" $out/train$n.log
done
