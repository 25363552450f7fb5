# Seventh call (2026-11-27): call 6's fine-tuning with all 64 layers upgraded (the committed kernels).
# The code: the kernels as committed (none of this record's patches).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/reverse-2026-11-27/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 580 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train64.log
