# First call: the backward's CUDA local pass with pass A pipelined (timing macro PIPEA 1) timed against the default
# build (time_pipea.py, interleaved, B = 1, L = 8192, bf16 and the mix; gradients compared), then checked against
# float64 and the Gluon pass (check_local.py --quick --defines PIPEA=1), then check_scan_gpu.py --quick
# --without-uncertainty with PIPEA 1 in every process (a sitecustomize sets it and says so in the log).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/pipea-2026-11-29/time_pipea.py > $out/pipea.log 2>&1
echo "pipea exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/pipea.log | tail -6
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines PIPEA=1 > $out/check_local.log 2>&1
echo "check_local exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/check_local.log
grep -E " no$|NO$|rror" $out/check_local.log | head -5
mkdir -p /tmp/pipea_site && cat > /tmp/pipea_site/sitecustomize.py <<'PY'
from palimpsa.kernels import chunked_bwd
chunked_bwd.CHUNKED_CONFIG["CUDA_DEFINES"] = "PIPEA=1"
print("PIPEA 1 set", flush=True)
PY
left=$(( 560 - ($(date +%s) - start) ))
PYTHONPATH=/tmp/pipea_site:$PYTHONPATH timeout $left python3 scripts/check_scan_gpu.py --quick --without-uncertainty \
  > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -c "PIPEA 1 set" $out/check_scan.log
grep -E "NO$|ERROR|passed" $out/check_scan.log | head -8
