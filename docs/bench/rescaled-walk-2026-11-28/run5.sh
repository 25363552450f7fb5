# Fifth call: the float64 checks at the final defaults (WALK_RESCALE 0, WIDEN 1) and with the 12-an-SM preset's keys
# (now with WALK_RESCALE 1, WIDEN 0), then fine-tuning at 2.7b shapes with all 64 layers upgraded (and 8 if time
# is left), the default against the preset interleaved in one process (ab_train.py).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
P12=SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0
timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty \
  --json $out/check.json > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check.log | tail -3
timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty --chunked-config $P12 \
  --json $out/check-preset.json > $out/check-preset.log 2>&1
echo "check preset exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-preset.log | tail -3
for n in 64 8; do
  left=$(( 470 - ($(date +%s) - start) ))
  [ $left -lt 60 ] && break
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --arm default= --arm preset=$P12 \
    > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab$n.log
done
