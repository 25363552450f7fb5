# Third call: call 2 found WIDEN faster (local pass 11.19 ms against 11.38 with WALK_RESCALE off) and the rescaled
# walk not (11.29 with both on), though it runs fewer instructions. Since then the walk computes each token's scale
# (an ex2) as the token's inputs arrive, a token ahead, off the states' chain; and L2PF bit 8 asks for the next
# block's start state in L1 as a block's last segment starts (call 1's profile: the walk's first update waits on
# that load). Gradients again (compare.py at the defaults), then bf16 and float32 side by side at B = 1, L = 8192,
# then ncu's per-instruction counts of the float32 default (L = 2048) by source function.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
here=docs/bench/rescaled-walk-2026-11-28
STAGE=3 PIPE=1 L2PF=4 timeout 150 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -E "FAIL|runs|rror" $out/compare.log | tail -3
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --backends \
  "chunked,chunked@L2PF=12,chunked@WALK_RESCALE=0,chunked@WALK_RESCALE=0:L2PF=12,chunked@WALK_RESCALE=0:WIDEN=0" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -6
P12=SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --float32 --backends \
  "chunked,chunked@WALK_RESCALE=0,chunked@L2PF=12,chunked@$P12,chunked@$P12:WALK_RESCALE=0" \
  --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench-f32.log | tail -6
rep=$out/ncu-f32
export TRITON_CACHE_DIR=$(mktemp -d)
timeout 100 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section SourceCounters \
  --section WarpStateStats --section SchedulerStats -o $rep \
  python3 scripts/bench_scan.py --profile --float32 --backends chunked@LOCAL=gluon > $out/ncu-f32.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $rep.ncu-rep --page details > $out/ncu-f32-details.txt 2>&1
ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
cubin=$(ls $TRITON_CACHE_DIR/*/palimpsa_gluon_local_kernel.cubin | head -1)
cp $cubin $out/gluon-local-f32.cubin
python3 scripts/ncu_source_digest.py $rep-source.csv 40 > $out/digest-f32.txt 2>&1
python3 $here/executed_by_function.py $rep-source.csv $cubin --element-tokens 1342177280 --lines 40 \
  > $out/by-function-f32.txt 2>&1
rm -f $rep.ncu-rep $rep-source.csv $out/ncu-f32.log
grep -E "Duration|Issued Warp|No Eligible" $out/ncu-f32-details.txt; head -12 $out/by-function-f32.txt
