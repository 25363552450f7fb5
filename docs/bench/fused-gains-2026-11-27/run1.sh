# First call (2026-11-27): the fused values and gains (kernels/fused_gains.py) on the GPU: their tests at CUDA
# (kernels against the PyTorch expressions, a model's logits and gradients through them), then fine-tuning with
# 8 of 64 layers upgraded, the PyTorch expressions (PALIMPSA_FUSED_GAINS=0) and the fused kernels one after the
# other, each against the plain model and with one profiled step.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/fused-gains-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gains.py \
  "tests/model/test_model.py::test_palimpsa_layer_through_the_fused_gains" > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
for mode in 0 1; do
  PALIMPSA_FUSED_GAINS=$mode timeout 240 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 \
    --profile 12 --json $out/train8-fused$mode.json > $out/train8-fused$mode.log 2>&1
  echo "train8 fused=$mode exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/train8-fused$mode.log
  grep -E "^profile|^  other" $out/train8-fused$mode.log
done
