# Eighth call (the session's last ~250 s of device time): fine-tuning at full-precision float32 products (the trainer's
# default), where "auto" now walks whole sequences (fused_recurrent.whole_by_default) instead of running the
# sequential kernel: the plain model, whole walks and WHOLE=0 (the sequential kernel) interleaved in one process
# (ab_train.py --full-precision, new), 3 rounds of 2 steps, 64 layers upgraded, then 8 if time is left.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/whole-2026-11-28/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 64 8; do
  left=$(( 225 - ($(date +%s) - start) ))
  [ $left -lt 40 ] && break
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --full-precision --rounds 3 \
    --steps 2 --arm whole= --arm sequential=WHOLE=0 > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab$n.log
done
