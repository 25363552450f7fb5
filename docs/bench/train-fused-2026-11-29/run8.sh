# Eighth call: the convolution's GPU tests as committed (the tile-size refusal included), then check_scan_gpu.py
# --quick --without-uncertainty as auto dispatches (the scan's and decoding step's launches run on their tensors' GPU
# since host-2026-11-29, not checked on a GPU since), on the Triton cache of call 1.
# Run from the repository root with .bench_deps, .whl and triton-cache.tgz beside it:
# OUT=dir bash docs/bench/train-fused-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_conv.py > $out/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -2 $out/tests.log
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|Error" $out/check_scan.log | head -20
