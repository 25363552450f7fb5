# Fourteenth call (2026-11-27): the committed defaults (KQ32 on, the corrections' early loads, correct_early 1):
# float64 checks as auto dispatches, the scan at B = 1 and 4, L = 8192, and fine-tuning with 8 and all 64 layers
# upgraded.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/ring-2026-11-27/run14.sh
# (the training runs without --json: a call returns 8 files at most; their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -3
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --backends triton > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +triton|^ +B=" $out/bench.log | tail -4
for n in 64 8; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 64 ] && left=$(( left / 2 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
