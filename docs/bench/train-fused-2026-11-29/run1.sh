# First call: the fused ops' GPU tests (convolution, readout, norm, gains and their dispatch), check_kernels.py at a
# 2.7b layer's shapes, then fine-tuning with 8 of 64 layers upgraded, three rounds, everything fused.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_conv.py tests/kernels/test_readout.py \
  tests/kernels/test_norm.py tests/kernels/test_gains.py tests/kernels/test_fused_dispatch.py > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
timeout 60 python3 docs/bench/host-2026-11-29/check_kernels.py > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/check.log | cut -c1-220
timeout 300 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 3 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds|fastest" $out/train8.log | cut -c1-250
source docs/bench/train-fused-2026-11-29/save_cache.sh
