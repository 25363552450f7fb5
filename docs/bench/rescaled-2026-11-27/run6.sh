# Sixth call (2026-11-27): why rescaling pass B's walks to the pairs made the local pass slower (call 2: 14.00 ms
# against 12.62): ncu's warp states and its per-instruction stall samples of the local pass with the walks plain
# (RESCALE=0) and rescaled (RESCALE=2), both from rescaled-walks.patch applied to a copy of the kernels; then
# fine-tuning with 8 and all 64 layers upgraded again at the committed defaults (call 3's plain run was slow).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-2026-11-27/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
alt=$(mktemp -d); cp -r kernels $alt/
patch -s -p1 -d $alt < docs/bench/rescaled-2026-11-27/rescaled-walks.patch || echo "patch failed"
site2=$(mktemp -d); mkdir -p $site2/palimpsa && touch $site2/palimpsa/__init__.py
ln -s $PWD/upgrade $site2/palimpsa/upgrade && ln -s $alt/kernels $site2/palimpsa/kernels
sections="--section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
for r in 0 2; do
  PYTHONPATH=$site2:$PWD/.bench_deps/site timeout 120 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 \
    $sections -o $out/r$r python3 scripts/bench_scan.py --profile --backends chunked@RESCALE=$r > $out/ncu-r$r.txt 2>&1
  echo "ncu RESCALE=$r exit $? at $(( $(date +%s) - start )) s"
  ncu -i $out/r$r.ncu-rep --page source --csv --print-source sass > /tmp/r$r.csv 2>/dev/null
  python3 scripts/ncu_source_digest.py /tmp/r$r.csv 40 >> $out/ncu-r$r.txt 2>&1
  rm -f $out/r$r.ncu-rep
done
grep -h -E "Duration|Warp Cycles Per Issued|Issued Warp|No Eligible|Executed Instructions  " $out/ncu-r*.txt | head -20
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 8 64; do
  left=$(( 590 - ($(date +%s) - start) )); [ $n = 8 ] && left=$(( left - 50 ))
  timeout $left python3 scripts/bench_train.py --upgraded $n --seq-lens 8192 --tf32 > $out/train$n.log 2>&1
  echo "train$n exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n.log
done
