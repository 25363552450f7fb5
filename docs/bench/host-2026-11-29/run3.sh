# Third call: the fused readout (kernels/fused_readout.py) on the GPU: its tests at CUDA (kernels against the
# PyTorch expressions; every layer of a small model through them), then one block's kernels with it
# (block_kernels.py, as in call 2, where the PyTorch expressions ran).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/host-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_readout.py \
  "tests/model/test_model.py::test_every_layer_through_the_fused_readout" > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
timeout 200 python3 docs/bench/host-2026-11-29/block_kernels.py --layers 8 --top 12 > $out/kernels8.log 2>&1
echo "kernels exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/kernels8.log | cut -c1-150
