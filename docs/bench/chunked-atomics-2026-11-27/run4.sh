# Fourth call (2026-11-27): pass A's prefetch two blocks ahead instead of one (LEAD=2: the third call put a tenth
# of the local pass in pass A, whose loads are the chunk's first touches), and the backward's tile transposed
# (TRANS=1); the float64 checks as dispatched first, and the fused gains' GPU tests (docs/bench/fused-gains-2026-11-27).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-atomics-2026-11-27/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_gains.py \
  "tests/model/test_model.py::test_palimpsa_layer_through_the_fused_gains" > $out/tests-gains.log 2>&1
echo "tests exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/tests-gains.log
timeout 130 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 240 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LEAD=2,chunked@TRANS=1" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -20
