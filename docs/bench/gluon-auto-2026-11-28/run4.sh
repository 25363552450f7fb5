# Fourth call (2026-11-28): call 2's fine-tuning runs put the Gluon local pass 2-3% behind the Triton pass, while
# call 3 timed it 6% ahead on the scan's float32 inputs (forward + backward 15.36 ms against 16.37). Here the
# Triton pass runs first and a profiled step of each (--profile) gives the scan kernels' GPU time per step, which
# the run order moves less than tokens/s; then the 64-layer runs in the opposite order to call 2's.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for run in 8:triton 8:auto 64:triton 64:auto; do
  n=${run%%:*} local=${run##*:} extra=; [ $n = 8 ] && extra="--profile 8"
  left=$(( 420 - ($(date +%s) - start) ))
  PALIMPSA_CHUNKED_LOCAL=$local timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 \
    $extra > $out/train$n-$local.log 2>&1
  echo "train$n $local exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|palimpsa scan [0-9]" $out/train$n-$local.log
done
