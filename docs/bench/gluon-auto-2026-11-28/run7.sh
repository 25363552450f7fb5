# Seventh call: is L2PF 4 (pass B's next block start state asked for in L2; call 5: the local pass 11.43 ms against
# 11.71 without) safe and fast enough to be the Gluon pass's default? Its gradients (compare.py with L2PF 5, both
# bits, and the 86 float64 checks with L2PF 4), and the timing again beside both passes in bf16 and float32.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
STAGE=3 PIPE=1 L2PF=5 timeout 110 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-l2pf.log 2>&1
echo "compare L2PF 5 exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-l2pf.log
timeout 240 python3 scripts/check_scan_gpu.py --backend triton-chunked --chunked-config LOCAL=auto:NSPLIT=2:L2PF=4 \
  --without-uncertainty --json $out/check-l2pf.json > $out/check-l2pf.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-l2pf.log | tail -4
for f32 in "" --float32; do
  left=$(( 580 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown $f32 \
    --backends "chunked@LOCAL=triton,chunked@LOCAL=gluon,chunked@LOCAL=gluon:L2PF=4" \
    --json $out/bench$f32.json > $out/bench$f32.log 2>&1
  echo "bench $f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "local " $out/bench$f32.log | tail -3
done
