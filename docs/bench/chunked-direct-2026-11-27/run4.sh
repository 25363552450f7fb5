# Fourth call (2026-11-27): fine-tuning throughput with the backward as it now stands by default (the prefetches
# of 2026-11-27 on; DIRECT, PIPELINE and PREFETCH=2 off, measured no faster), 2.7b shapes, L = 8192, 8 and all 64
# layers upgraded against the plain model in the same run.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 260 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train8.log
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train64.log
