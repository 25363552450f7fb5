# Tenth call (2026-11-29, next session): the forward's local pass in CUDA C++ (cuda_fwd_local.py) on a GPU for the
# first time: check_scan_gpu.py --quick --without-uncertainty with it under auto, then fwd_parts.py (checkpoints
# against Triton's local pass, both timed), then bench_scan.py at B = 1 and 4 against SSD with it under auto.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run10.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
export PALIMPSA_CUDA_FWD_LOCAL=auto
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|LOCAL|local|arn" $out/check_scan.log | head -20
timeout 120 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --tilings="-,local_CUDA=1" > $out/parts.log 2>&1
echo "parts exit $? at $(( $(date +%s) - start )) s"; tail -30 $out/parts.log
left=$(( 540 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 --backends chunked \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "B=[14] L=8192|floor" $out/bench.log | head -12
