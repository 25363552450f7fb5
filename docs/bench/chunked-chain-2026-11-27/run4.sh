# Fourth call (2026-11-27): the chunk walk's readout summed by one butterfly that reduce-scatters its 8 channels
# over the lanes, from FFMA chains over each lane's states (SCATTER, on by default): the float64 checks with the
# chunked forward in every case, the forward timed with and without it (f+b too), and fine-tuning with 8 and all 64
# layers upgraded as everything now stands.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-chain-2026-11-27/run4.sh
# (the training runs without --json: a call returns 8 files at most; their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 130 python3 scripts/check_scan_gpu.py --quick --forward chunked --json $out/check-chunked-fwd.json \
  > $out/check-chunked-fwd.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked-fwd.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192,2x8192 \
  --backends "fwd[walk_SCATTER=0]:chunked,chunked" --json $out/bench-fwd.json > $out/bench-fwd.log 2>&1
echo "bench fwd exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-fwd.log
for n in 8 64; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 8 ] && left=$(( left - 60 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
