# Sixth H100 call (2026-11-26), the final code: the forward at B = 4 with initial states in against without, then
# fine-tuning with all 64 layers upgraded. Run from the repository root with .bench_deps and .whl beside it:
#   OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 4x8192,1x8192 --backends "triton,state:triton" \
  --json $out/bench-state.json > $out/bench-state.log 2>&1
echo "bench state exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-state.log
timeout 330 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train64.log
