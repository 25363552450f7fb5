# Fifth call: fine-tuning at 2.7b shapes with the CUDA chunk walk as `auto` takes it (bench_train.py --tf32, the plain
# model beside the upgraded one in the same process), 8 and 64 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for n in 8 64; do
  left=$(( 560 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio" $out/train$n.log
done
