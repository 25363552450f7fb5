# Second call (2026-11-27, on the first call's machine): the GPU tests again (the model test now runs its model on
# the GPU, against the PyTorch expressions there), then fine-tuning with all 64 layers upgraded, the PyTorch
# expressions (PALIMPSA_FUSED_GAINS=0) and the fused kernels one after the other, each against the plain model.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/fused-gains-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gains.py \
  "tests/model/test_model.py::test_palimpsa_layer_through_the_fused_gains" > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
for mode in 0 1; do
  left=$(( 590 - ($(date +%s) - start) )); [ $mode = 0 ] && left=$(( left / 2 + 40 ))
  PALIMPSA_FUSED_GAINS=$mode timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 \
    --json $out/train64-fused$mode.json > $out/train64-fused$mode.log 2>&1
  echo "train64 fused=$mode exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/train64-fused$mode.log
done
