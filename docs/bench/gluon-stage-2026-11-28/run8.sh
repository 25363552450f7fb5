# Eighth call (2026-11-28): STAGE 3 (every per-token input of pass B in shared memory) beat the Triton pass in call 7
# (11.99 ms against 12.20). With it, half the segment (SEG 2: half the states' shared memory, more walks) and loads a
# token ahead (PIPE, now from shared memory), side by side at B = 1, L = 8192.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-stage-2026-11-28/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@LOCAL=gluon:STAGE=3,chunked@LOCAL=gluon:STAGE=3:SEG=2,chunked@LOCAL=gluon:STAGE=3:PIPE=1" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
