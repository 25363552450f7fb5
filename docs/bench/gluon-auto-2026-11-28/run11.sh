# Eleventh call: does a ninth program an SM make the Gluon local pass faster? With bf16 inputs it takes 215
# registers (Triton 3.6) and 24,800 bytes of shared memory, so 9 one-warp programs fit an SM (224 registers and
# 24,917 bytes at most); in float32 (241 registers, 24,992 bytes) they do not. NSPLIT 8 gives 9 rounds of work
# items over 9 programs an SM (1,138 programs) and 10 over 8 (1,024), so both rows take it.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run11.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@NSPLIT=8,chunked@NSPLIT=8:PROGRAMS_PER_SM=9" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -4
