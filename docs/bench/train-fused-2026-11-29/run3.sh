# Third call: the convolution's backward computing each token's du once (kernels/fused_conv.py): its GPU tests, the
# check at a 2.7b layer's shapes against PyTorch (check_kernels.py), its time (time_conv.py) and a block's kernels
# (block_kernels.py, as host-2026-11-29 call 6), on the Triton cache of call 1 (carry triton-cache.tgz).
# Run from the repository root with .bench_deps, .whl and triton-cache.tgz beside it:
# OUT=dir bash docs/bench/train-fused-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_conv.py tests/kernels/test_fused_dispatch.py \
  > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
timeout 60 python3 docs/bench/host-2026-11-29/check_kernels.py > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/check.log | grep conv | cut -c1-220
timeout 60 python3 docs/bench/train-fused-2026-11-29/time_conv.py > $out/time_conv.log 2>&1
echo "time exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/time_conv.log | cut -c1-220
timeout 120 python3 docs/bench/host-2026-11-29/block_kernels.py --layers 8 --top 12 > $out/kernels8.log 2>&1
echo "kernels exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/kernels8.log | cut -c1-150 | head -60
