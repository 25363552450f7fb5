# Second call: pass B's walks in rescaled states (WALK_RESCALE) and 16-bit staged values, gains and output gradients
# widened to float32 once a block (WIDEN), both on by default. First the gradients: compare.py at the kernel's
# defaults (STAGE 3, PIPE, L2PF 4) with its three new slow-decay cases, where pass B walks rescaled, and
# check_scan_gpu.py's float64 checks through the default dispatch (the Gluon pass on Hopper); then the local pass
# and forward + backward timed side by side, bf16, B = 1, L = 8192: both on, each alone, both off (the walk of
# before, in (M, I - I_prior) form), and the Triton local pass.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
STAGE=3 PIPE=1 L2PF=4 timeout 150 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -E "FAIL|runs|rror" $out/compare.log | tail -5
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty \
  --json $out/check.json > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check.log | tail -3
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --backends \
  "chunked,chunked@WALK_RESCALE=0:WIDEN=0,chunked@WIDEN=0,chunked@WALK_RESCALE=0,chunked@LOCAL=triton" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local |chunked" $out/bench.log | tail -14
