# Second call (2026-11-27): the backward's rescaled recompute by part (RESCALE bits: 1 pass A, 2 the walks to the
# pairs; call 1 measured both together 8.6% slower), the local pass timed side by side, then fine-tuning with 8 and
# all 64 layers upgraded with the chunk walk of the forward rescaled (its default since call 1).
# Run from the repository root with .bench_deps and .whl beside it, with rescaled-walks.patch applied (the kernels as
# they were then; git apply docs/bench/rescaled-2026-11-27/rescaled-walks.patch):
# OUT=dir bash docs/bench/rescaled-2026-11-27/run2.sh
# (the training runs without --json: a call returns 8 files at most; their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 230 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@RESCALE=0,chunked@RESCALE=1,chunked@RESCALE=2" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
for n in 8 64; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 8 ] && left=$(( left - 60 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
