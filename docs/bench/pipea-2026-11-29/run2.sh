# Second call: where PIPEA's time went (call 1: 9.46 ms against 8.56): both builds with and without pass A (CUDA_PROBE
# 8), interleaved; then the defaults of this session (FIXCP 1, the forward's CUDA local pass under auto wherever it
# runs) measured as the targets ask: bench_scan.py --breakdown at B = 1 and 4, L = 8192, against SSD, and
# bench_train.py with 8 layers upgraded, two rounds.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/pipea-2026-11-29/time_pipea.py --variants ",PIPEA=1,@8,PIPEA=1@8" > $out/pipea.log 2>&1
echo "pipea exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/pipea.log | tail -10
timeout 170 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 --backends chunked \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "B=[14] L=8192|floor" $out/bench.log | head -12
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log | cut -c1-250
