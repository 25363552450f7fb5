# Fifteenth call: the opt-in preset PALIMPSA_GLUON_LOCAL_PROGRAMS=12 (SEG 2, LOCAL_MAXNREG 168 and the new
# LOCAL_PROGRAMS_PER_SM 12, which only the Gluon pass takes) checked through the environment by check_scan_gpu, then
# timed beside the defaults (NSPLIT = 0 now rounds-aware) at B = 1, L = 2k / 8k / 16k, through
# its config keys; float32 at L = 8k.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run15.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
P12=LOCAL_PROGRAMS_PER_SM=12:SEG=2:LOCAL_MAXNREG=168
PALIMPSA_GLUON_LOCAL_PROGRAMS=12 timeout 120 python3 scripts/check_scan_gpu.py --backend triton-chunked \
  --without-uncertainty --json $out/check-env12.json > $out/check-env12.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-env12.log | tail -3
timeout 260 python3 scripts/bench_scan.py --no-step --shapes 1x2048,1x8192,1x16384 --breakdown \
  --backends "chunked,chunked@$P12" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -6
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --float32 --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@$P12" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench-f32.log | tail -3
