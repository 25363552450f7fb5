# Seventh call (not run yet: this session's device time was spent; the next session's first): fine-tuning with the
# CUDA local pass taking keys and queries in their own dtype (an upgraded layer feeds the scan float32 values, gains
# and output gradients with bf16 keys and queries, which call 6's build refused, so the Gluon pass's whole walks ran).
# LOCAL "auto" leaves that combination to the Gluon pass until a GPU has run it, so PALIMPSA_CHUNKED_LOCAL=cuda asks
# for it here: 64 layers upgraded, then 8.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
export PALIMPSA_CHUNKED_LOCAL=cuda
for n in 64 8; do
  left=$(( 500 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|LOCAL_RUNS" $out/train$n.log
done
