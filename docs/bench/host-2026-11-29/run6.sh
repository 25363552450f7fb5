# Sixth call: with the block's residual sum and RMSNorm fused too (kernels/fused_norm.py) and SSD's output fed to the
# readout in its own dtype: check_kernels.py at a 2.7b layer's shapes (now the norm as well), and fine-tuning with 8
# and with 64 layers upgraded, one round each, then one block's kernels (block_kernels.py, as calls 2 and 3).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/host-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 60 python3 docs/bench/host-2026-11-29/check_kernels.py > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/check.log | cut -c1-220
timeout 90 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192" $out/train8.log | cut -c1-250
timeout 80 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192" $out/train64.log | cut -c1-250
timeout 60 python3 docs/bench/host-2026-11-29/block_kernels.py --layers 8 --top 10 > $out/kernels8.log 2>&1
echo "kernels exit $? at $(( $(date +%s) - start )) s"; grep -E "block" $out/kernels8.log | cut -c1-150
