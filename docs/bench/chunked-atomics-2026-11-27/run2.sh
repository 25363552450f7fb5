# Second call (2026-11-27): what each part of the local pass costs, by leaving it out (PROBE bits, timing only, wrong
# gradients): 1 the dk/dq sums and atomics, 2 the slab's stores (pass B starts every block at the checkpoint), 4 the
# dv/dbeta row sums and stores, 8 pass A (and the slab), 16 the decay gradient's sum and atomic; 31 all of them.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-atomics-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PROBE=1,chunked@PROBE=2,chunked@PROBE=4,chunked@PROBE=8,chunked@PROBE=16,chunked@PROBE=31" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -20
