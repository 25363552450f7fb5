# Tenth call (2026-11-27): what the corrections' dk part costs, to decide whether a separate dk kernel (one program a
# token block summing over the heads by matrix products, no atomics) would pay: correct_probe (timing only, wrong
# gradients) 1 leaves dk out of the corrections, 3 computes its products but stores nothing (no atomics).
# Run from the repository root with .bench_deps beside it, with correct-probe.patch applied (git apply
# docs/bench/ring-2026-11-27/correct-probe.patch; not kept): OUT=dir bash docs/bench/ring-2026-11-27/run10.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@correct_probe=1,chunked@correct_probe=3" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|correct " $out/bench-b1.log | tail -5
