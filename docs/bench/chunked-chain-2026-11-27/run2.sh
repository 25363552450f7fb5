# Second call (2026-11-27): pass B keeps each block's middle in the slab's last slot, so that a block's second half
# walks from there (MIDSTATE: 8 recompute updates a block of 8 tokens instead of 12), on by default with CHAIN and
# FAST_EXP: the float64 checks as auto dispatches, both backwards timed with and without it, then fine-tuning with 8
# and all 64 layers upgraded as everything now stands.
# MIDSTATE is not in the kernels any more: apply it first (git apply docs/bench/chunked-chain-2026-11-27/midstate.patch
# at the commit that added this script), then, from the repository root with .bench_deps and .whl beside it:
# OUT=dir bash docs/bench/chunked-chain-2026-11-27/run2.sh
# (bench-b4 and the training runs without --json: a call returns 8 files at most; their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 130 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@MIDSTATE=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
timeout 100 python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "sequential@MIDSTATE=0,triton" > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
for n in 8 64; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 8 ] && left=$(( left - 60 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 \
    > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
