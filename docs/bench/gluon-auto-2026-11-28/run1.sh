# First call (2026-11-28): the chunk-parallel backward's LOCAL now defaults to "auto" (the Gluon local pass on sm_90
# where gluon_local.unsupported allows it). Before that default can stand, the float64 checks on the Gluon pass:
# compare.py with the defaults (STAGE 3, PIPE; its fifth case is bf16 inputs with float32 decays, the timed
# combination), then every check_scan_gpu.py case through the chunked backward (NSPLIT=2, so the packed and one-chunk
# cases reach it too) without the uncertainty output (whose gradient only the Triton pass has); then the default
# backends against the Triton local pass and SSD at B = 1 and 4.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run1.sh
# (The calls ran while LOCAL defaulted to "auto"; it defaults to "triton" again since call 4, so the commands
# below name LOCAL=auto where the call ran the default: the same kernels.)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
STAGE=3 PIPE=1 timeout 120 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep "f32 decays" $out/compare.log
timeout 260 python3 scripts/check_scan_gpu.py --backend triton-chunked --chunked-config LOCAL=auto:NSPLIT=2 \
  --without-uncertainty --json $out/check-gluon.json > $out/check-gluon.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-gluon.log | tail -4
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --breakdown \
  --backends "gluon,chunked@LOCAL=auto,chunked@LOCAL=triton" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench.log | tail -12
