# Eighth call: fine-tuning with each local pass interleaved in one process (ab_train.py), 8 and 64 layers upgraded,
# the Gluon arm with L2PF 4.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 8 64; do
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --l2pf 4 > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab$n.log
done
