# Fourth call: the final build's float64 checks as dispatched (check_scan_gpu.py runs float32 at full precision,
# whose backward walks whole as before; bf16 keeps its splits), then fine-tuning under TF32 with all 64 layers
# upgraded (float32 scan inputs, one document a row): the new split choice (whole walks at 12 an SM at B = 1) against
# the old one (WHOLE_OCCUPANCY=0: the split), interleaved, four rounds (call 2's three did not resolve it).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/start-ahead-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 scripts/check_scan_gpu.py --quick --json $out/check.json > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check.log | tail -4
left=$(( 420 - ($(date +%s) - start) ))
timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded 64 --rounds 4 --steps 2 \
  --arm auto= --arm split=WHOLE_OCCUPANCY=0 > $out/ab64.log 2>&1
echo "ab 64 exit $? at $(( $(date +%s) - start )) s"; tail -6 $out/ab64.log
