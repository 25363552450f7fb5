# Sixth call: float32 inputs with full-precision matrix products (bench_scan.py --float32 --full-precision, new: what
# the trainer runs by default, train.tf32 false), where "auto" takes the sequential forward and backward: auto
# against whole walks (chunked@NSPLIT=1), the split with IEEE corrections (chunked), and whole walks after the
# chunk-parallel forward in IEEE products (fwd[]:chunked@NSPLIT=1), B = 1 and 4, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --float32 --full-precision --shapes 1x8192,4x8192 \
  --backends "triton,chunked@NSPLIT=1,chunked,fwd[]:chunked@NSPLIT=1" --json $out/bench-f32-full.json \
  > $out/bench-f32-full.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|\|" $out/bench-f32-full.log | tail -12
