# Second call (2026-11-28): fine-tuning throughput with the Gluon local pass as the default on Hopper (LOCAL auto)
# against the Triton local pass (PALIMPSA_CHUNKED_LOCAL=triton), 2.7b shapes, L = 8192, 8 and all 64 layers
# upgraded, each run against the plain model in the same run; the two local passes alternate.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run2.sh
# (the training runs without --json: their logs hold the tables)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for run in 8:auto 8:triton 64:auto 64:triton; do
  n=${run%%:*} local=${run##*:}
  left=$(( 590 - ($(date +%s) - start) ))
  PALIMPSA_CHUNKED_LOCAL=$local timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 \
    > $out/train$n-$local.log 2>&1
  echo "train$n $local exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n-$local.log
done
