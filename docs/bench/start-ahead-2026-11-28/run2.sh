# Second call: at B = 1 float32 inputs with TF32 products (what fine-tuning feeds the scan with train.tf32 true) split
# the backward, whose TF32 corrections cost 1.90 ms in float32 against 1.26 in bf16 (call 1), while whole walks at 12
# programs an SM (SPLIT=0; WHOLE_OCCUPANCY takes the preset's keys at B = 1) need no corrections and ran the float32
# backward in 11.96 ms at full precision (docs/bench/tf32x3-2026-11-28, call 7). Timed side by side at L = 8192 and
# 2048 (the local pass's breakdown at 8192), then fine-tuning with all 64 layers upgraded, TF32, one document a row,
# the two interleaved in one process.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/start-ahead-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 scripts/bench_scan.py --no-step --breakdown --float32 --shapes 1x8192,1x2048 \
  --backends "chunked,chunked@SPLIT=0" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local|^ +chunked" $out/bench-f32.log | tail -9
left=$(( 500 - ($(date +%s) - start) ))
timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded 64 --rounds 3 --steps 2 \
  --arm auto= --arm whole=SPLIT=0 > $out/ab64.log 2>&1
echo "ab 64 exit $? at $(( $(date +%s) - start )) s"; tail -12 $out/ab64.log
