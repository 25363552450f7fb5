# Sixth call (2026-11-27): call 5 found the Gluon pass's L1 hit rate at 24.5% against the Triton pass's 46.4% (ncu,
# B = 1, L = 2048): its 16 KB of shared memory a program (8 programs an SM) take the L1's capacity (the carve-out),
# while each block's inputs are read again by the walks and the reverse steps. Float32 keys and queries (KQ32) take
# twice the lines of bf16 ones; here the Gluon pass reads the bf16 ones (KQ32=0), at SEG = 4 and at SEG = 2 (half the
# shared memory), beside the Triton pass as dispatched, timed side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-local-2026-11-27/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 320 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:SEG=4,chunked@LOCAL=gluon:SEG=4:KQ32=0,chunked@LOCAL=gluon:SEG=2:KQ32=0" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -8
