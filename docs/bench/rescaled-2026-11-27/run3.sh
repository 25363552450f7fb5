# Third call (2026-11-27): the defaults as committed, rescaled states in the chunk walk of the forward and in the
# backward's pass A only (the walks to the pairs plain again): the float64 checks as auto dispatches, the forward,
# forward + backward and local pass at B = 1 and the sequential backward at B = 4 side by side with RESCALE off
# everywhere (the previous defaults), then fine-tuning with 8 and all 64 layers upgraded.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-2026-11-27/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 130 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "fwd[walk_RESCALE=0]:chunked@RESCALE=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
timeout 100 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "sequential@RESCALE=0,triton" \
  > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
for n in 8 64; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 8 ] && left=$(( left - 50 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
