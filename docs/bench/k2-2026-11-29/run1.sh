# First call (prepared on the CPU, not yet run): the backward's CUDA local pass with dk's gains doubled once a token
# (timing macro K2 1) timed against the default build (the pipea record's time_pipea.py, whose --variants take any
# CUDA_DEFINES: interleaved, B = 1, L = 8192, bf16 and the mix; dv and dbeta should match bit for bit), then
# check_local.py --quick with K2 1, then check_scan_gpu.py --quick --without-uncertainty with K2 1 in every process,
# then bench_scan.py at B = 1, L = 8192 with both builds beside SSD (the forward + backward target is 2.5x SSD).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/k2-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/pipea-2026-11-29/time_pipea.py --variants ",K2=1" --rounds 8 > $out/k2.log 2>&1
echo "k2 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/k2.log | tail -6
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines K2=1 > $out/check_local.log 2>&1
echo "check_local exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/check_local.log
mkdir -p /tmp/k2_site && cat > /tmp/k2_site/sitecustomize.py <<'PY'
from palimpsa.kernels import chunked_bwd
chunked_bwd.CHUNKED_CONFIG["CUDA_DEFINES"] = "K2=1"
print("K2 1 set", flush=True)
PY
left=$(( 420 - ($(date +%s) - start) ))
PYTHONPATH=/tmp/k2_site:$PYTHONPATH timeout $left python3 scripts/check_scan_gpu.py --quick --without-uncertainty \
  > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -c "K2 1 set" $out/check_scan.log
grep -E "NO$|ERROR|passed" $out/check_scan.log | head -8
left=$(( 580 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 \
  --backends "chunked,chunked@LOCAL=cuda:CUDA_DEFINES=K2=1" > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "L=8192|chunked" $out/bench.log | head -8
