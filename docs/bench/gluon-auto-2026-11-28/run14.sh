# Fourteenth call: NSPLIT = 0 now picks the split count that leaves the fewest chunk times in the last round
# (chunked_bwd._splits; at B = 1 it changes L = 16384 from 4 to 32 and leaves L = 2048 and 8192 at 4), so
# check_scan_gpu without a set NSPLIT checks that choice (its 16k case takes 32); then with SEG 2 at 12 programs an
# SM (LOCAL_MAXNREG 168; NSPLIT then 16 at L = 8192). Last, fine-tuning with the default and with SEG 2 at 12 an SM
# interleaved in one process (ab_train.py --arm), 64 and 8 layers upgraded, with each arm's peak memory.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run14.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
S2=SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12
timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty \
  --json $out/check-auto-splits.json > $out/check-auto-splits.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto-splits.log | tail -3
timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty --chunked-config $S2 \
  --json $out/check-seg2-12.json > $out/check-seg2-12.log 2>&1
echo "check seg2 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-seg2-12.log | tail -3
for n in 64 8; do
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --arm default= --arm seg2-12=$S2 \
    > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/ab$n.log
done
