# Third call (2026-11-27): as committed (CHAIN and FAST_EXP on, MIDSTATE taken out again): fine-tuning with 8 and
# all 64 layers upgraded, the local pass beside the previous default once more, and the scan at 2k and 16k tokens.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-chain-2026-11-27/run3.sh
# (the training runs without --json: a call returns 8 files at most; their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 8 64; do
  timeout 200 python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@CHAIN=0:FAST_EXP=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x16384 --backends triton \
  --json $out/bench-lengths.json > $out/bench-lengths.log 2>&1
echo "bench lengths exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-lengths.log
