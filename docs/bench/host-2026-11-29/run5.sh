# Fifth call: check_kernels.py (the fused convolution and readout against PyTorch at a 2.7b layer's shapes; call 4's
# check through whole blocks did not finish in its time), then fine-tuning with both fused (the new default) with 8
# and with all 64 layers upgraded, one round each.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/host-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 60 python3 docs/bench/host-2026-11-29/check_kernels.py > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/check.log | cut -c1-220
timeout 110 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192" $out/train8.log | cut -c1-250
timeout 170 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192" $out/train64.log | cut -c1-250
