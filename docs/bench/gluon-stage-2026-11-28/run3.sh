# Note (found in call 6, fixed before call 7): chunked_bwd passed bool(STAGE) to the launch, so this call ran
# STAGE 1 wherever it asked for 2 or 3 (README.md).
# Third call (2026-11-28): call 1's staged pass left the values' and gains' loads in the walks as its longest waits
# (gluon-local's call 3: the first use of a walk's value load, ~470 cycles, a tenth of the stall samples, before
# staging). STAGE=2 also copies each block's 4 channels of values and gains to shared memory (8 bytes a token and
# tensor in bf16) with the keys, and drops their prefetches. compare.py with STAGE=2, then the Triton pass as
# dispatched and the Gluon pass with STAGE 1 and 2 side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
STAGE=2 timeout 200 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage2.log 2>&1
echo "compare STAGE=2 exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage2.log
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:STAGE=1,chunked@LOCAL=gluon:STAGE=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
