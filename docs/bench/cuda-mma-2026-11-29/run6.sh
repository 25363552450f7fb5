# Sixth call: fine-tuning at 2.7b shapes (bench_train.py --tf32: float32 scan inputs with TF32 allowed, where LOCAL
# "auto" takes the CUDA local pass), 64 layers upgraded, then 8, the plain model beside the upgraded one in one
# process each.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for n in 64 8; do
  left=$(( 330 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|LOCAL_RUNS" $out/train$n.log
done
