# Second call (2026-11-27): call 1's Gluon local pass was correct (within 1e-5 / 1e-2 of float64, 1.5e-6 of the
# Triton pass in float32) and slower (15.17 ms against 12.18 at SEG = 4). Now each token's 4 channel values, gains and output gradients come
# from one vector load (inline PTX) instead of four scalar loads, the atomics of dq, dk are unmasked (an invalid
# token adds zeros at the sequence's last token: no branch), and pass A walks rescaled states where a block allows
# it, as the Triton pass does. The same checks and timings as call 1.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare.log; grep -v " 0.00e+00" $out/compare.log | tail -4
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:SEG=4,chunked@LOCAL=gluon:SEG=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
