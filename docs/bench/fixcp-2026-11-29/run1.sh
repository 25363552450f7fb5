# First call (prepared on the CPU, not yet run): the backward's CUDA local pass and corrections with each thread's
# copies at fixed offsets (FIXCP 1) against the checked form (FIXCP 0): time_fixcp.py (times, gradients' differences),
# then check_local.py --quick (the local pass) and --quick --correct (the corrections) and check_scan_gpu.py --quick
# --without-uncertainty, with FIXCP 1 in both kernels (a sitecustomize sets it in every process and says so in each
# log; check_local.py gets --defines FIXCP=1 as well).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fixcp-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 120 python3 docs/bench/fixcp-2026-11-29/time_fixcp.py > $out/fixcp.log 2>&1
echo "fixcp exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/fixcp.log | tail -6
mkdir -p /tmp/fixcp_site && cat > /tmp/fixcp_site/sitecustomize.py <<'PY'
from palimpsa.kernels import chunked_bwd, cuda_correct
chunked_bwd.CHUNKED_CONFIG["CUDA_DEFINES"] = "FIXCP=1"
cuda_correct.FIXCP = 1
print("FIXCP 1 set in both kernels", flush=True)
PY
PYTHONPATH=/tmp/fixcp_site:$PYTHONPATH timeout 140 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick \
  --defines FIXCP=1 > $out/check_local.log 2>&1
echo "check_local exit $? at $(( $(date +%s) - start )) s"; grep -c "FIXCP 1 set" $out/check_local.log; tail -4 $out/check_local.log
PYTHONPATH=/tmp/fixcp_site:$PYTHONPATH timeout 140 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick \
  --correct --defines FIXCP=1 > $out/check_correct.log 2>&1
echo "check_correct exit $? at $(( $(date +%s) - start )) s"; grep -c "FIXCP 1 set" $out/check_correct.log
tail -4 $out/check_correct.log
left=$(( 580 - ($(date +%s) - start) ))
PYTHONPATH=/tmp/fixcp_site:$PYTHONPATH timeout $left python3 scripts/check_scan_gpu.py --quick --without-uncertainty \
  > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -c "FIXCP 1 set" $out/check_scan.log
grep -E "NO$|ERROR|passed|cuda local\]" $out/check_scan.log | head -24
