# Fifth call: fine-tuning at 2.7b shapes with the shipped defaults (bench_train.py --tf32, L = 8192, 8 and all 64
# layers upgraded against the plain model), the figures docs/kernels.md's "Speed" quotes.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 8 64; do
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio" $out/train$n.log
done
