# Sixth call (2026-11-27): the committed defaults (c2c8931's kernels: KQ32, the corrections' early loads) at every
# shape of the targets as auto dispatches, side by side with SSD, then fine-tuning with 8 of 64 layers
# upgraded: the current figures for the table in one call.
# The code: the kernels as committed (none of this record's patches).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 330 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192,1x16384,4x2048,4x8192,4x16384 \
  --backends triton --json $out/bench-all.json > $out/bench-all.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +triton" $out/bench-all.log | tail -8
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train8.log
