# Eighth call (the session's last ~250 s of device time): whole walks at the occupancy preset (WHOLE_OCCUPANCY, new
# default: where it needs fewer rounds, B = 1 at 2.7b shapes) had been timed (call 7) but never checked: every case of
# check_scan_gpu.py walked whole at the preset's keys, against float64; then fine-tuning at full precision, all 64
# layers upgraded, one document a row (B = 1): the new default against WHOLE_OCCUPANCY=0 (8 an SM), interleaved.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 90 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --without-uncertainty \
  --chunked-config SPLIT=0:SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0 \
  --json $out/check-whole-preset.json > $out/check-whole-preset.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror|gluon" $out/check-whole-preset.log | tail -9
left=$(( 215 - ($(date +%s) - start) ))
timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded 64 --full-precision --rounds 2 \
  --steps 2 --arm auto= --arm whole8=WHOLE_OCCUPANCY=0 > $out/ab64.log 2>&1
echo "ab 64 exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab64.log
