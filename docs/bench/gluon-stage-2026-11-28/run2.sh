# Second call (2026-11-28): call 1's staged pass (local 13.30 ms against 14.01 unstaged and the Triton pass's 12.34) has
# an L1 hit rate of 5.75%: with 24 KB of shared memory a program the L1 keeps ~28 KB, less than the prefetched lines of
# the small inputs (values, gains, decays, output gradients: a line a token each). Staging the rows as bf16
# (KQ32=0: the original keys and queries, 4 KB instead of 8) leaves ~60 KB; PREFETCH=0 drops the prefetches. The
# Triton pass as dispatched and without KQ32 beside them, B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@KQ32=0,chunked@LOCAL=gluon:STAGE=1,chunked@LOCAL=gluon:STAGE=1:KQ32=0,chunked@LOCAL=gluon:STAGE=1:PREFETCH=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -7
