# Sixteenth call: PALIMPSA_GLUON_LOCAL_PROGRAMS=12 now applies where its rounds cost no more program time than the
# default's (chunked_bwd._program_time), so not at L = 2048 where call 15 found it slower. bench_scan with and
# without the variable (two processes: at B = 1 these times are the kernels', 3.8-30 ms).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run16.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for preset in 8 12; do
  PALIMPSA_GLUON_LOCAL_PROGRAMS=$preset timeout 140 python3 scripts/bench_scan.py --no-step \
    --shapes 1x2048,1x8192,1x16384 --backends chunked --json $out/bench-$preset.json > $out/bench-$preset.log 2>&1
  echo "bench $preset exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench-$preset.log | tail -3
done
