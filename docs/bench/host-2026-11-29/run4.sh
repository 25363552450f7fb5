# Fourth call: the fused convolution (kernels/fused_conv.py) and readout on the GPU: their tests at CUDA, the
# check at real shapes against the PyTorch expressions (check_blocks.py), then fine-tuning with 8 of 64 layers
# upgraded with both fused (the new default) and with neither (PALIMPSA_FUSED_CONV=0 PALIMPSA_FUSED_READOUT=0, as
# before this change), each against its plain model.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/host-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_conv.py tests/kernels/test_readout.py \
  > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/tests.log
timeout 120 python3 docs/bench/host-2026-11-29/check_blocks.py > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/check.log | cut -c1-220
timeout 150 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds" $out/train8.log | cut -c1-250
PALIMPSA_FUSED_CONV=0 PALIMPSA_FUSED_READOUT=0 timeout 120 python3 scripts/bench_train.py --upgraded 8 \
  --seq-lens 8192 --tf32 --json $out/train8-unfused.json > $out/train8-unfused.log 2>&1
echo "train8 unfused exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds" $out/train8-unfused.log | cut -c1-250
