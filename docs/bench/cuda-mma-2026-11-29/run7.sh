# Seventh call (the first of session 34): the CUDA local pass with keys and queries in their own dtype, as an upgraded
# layer feeds the scan in fine-tuning (float32 values, gains and output gradients; bf16 keys and queries). Call 6's
# build refused that combination, so the Gluon pass's whole walks ran. First check_local.py's mixed case and its
# float32 TF32 case against float64, then fine-tuning with PALIMPSA_CHUNKED_LOCAL=cuda (LOCAL "auto" leaves the mixed
# combination to the Gluon pass until a GPU has run it): 64 layers upgraded, then 8. The corrections ran in Triton then
# (PALIMPSA_CHUNKED_CORRECT=triton keeps them so; the CUDA corrections came after, docs/bench/cuda-correct-2026-11-29).
# check_local.py's mixed case had a tolerance of 1e-3 then (2e-3 since: the Gluon pass's dk, dq are as far).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
export PALIMPSA_CHUNKED_CORRECT=triton
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --cases 5,6 > $out/check_mixed.log 2>&1
echo "check_mixed exit $? at $(( $(date +%s) - start )) s"; cat $out/check_mixed.log | grep -v "^$" | tail -30
export PALIMPSA_CHUNKED_LOCAL=cuda
for n in 64 8; do
  left=$(( 560 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|LOCAL_RUNS" $out/train$n.log
done
