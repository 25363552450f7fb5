# Thirteenth call: the warpgroup form's pipeline (fwd_parts.py): inputs 2 or 3 stages deep (RAWS), and a stage's
# products running while the next stage's B operands are written (OVERLAP), against the form of call 12 (2, 0);
# check_scan_gpu.py --quick --without-uncertainty on the fastest-looking one (3, 1) first.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run13.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
cat > /tmp/sitecustomize.py <<'PY'
from palimpsa.kernels import cuda_fwd_local
cuda_fwd_local.RAWS, cuda_fwd_local.OVERLAP = 3, True
PY
PYTHONPATH=/tmp:$PYTHONPATH PALIMPSA_CUDA_FWD_LOCAL=auto timeout 200 python3 scripts/check_scan_gpu.py --quick \
  --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|arn" $out/check_scan.log | head -20
timeout 200 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --cases bf16:1,bf16:4,mix:1 \
  --tilings="local_CUDA=1,local_CUDA=1:raws=3,local_CUDA=1:overlap=1,local_CUDA=1:raws=3:overlap=1" \
  > $out/parts.log 2>&1
echo "parts exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/parts.log | cut -c1-190 | tail -12
