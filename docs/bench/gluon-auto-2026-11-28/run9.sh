# Ninth call: the shipped defaults after the change (LOCAL "auto", L2PF 4): the 86 float64 checks without an
# uncertainty output (the Gluon pass must run in every case without being asked for), the scan beside SSD at
# B = 1 (the chunk-parallel backward: the local pass runs), and bench_train.py with 8 and 64 layers upgraded.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --chunked-config NSPLIT=2 \
  --without-uncertainty --json $out/check-default.json > $out/check-default.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-default.log | tail -4
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192,1x16384 --breakdown \
  --backends "chunked,chunked@LOCAL=triton" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -9
for n in 8 64; do
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|local passes" $out/train$n.log
done
