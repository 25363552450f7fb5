# Eighth call: where an upgraded layer's time goes in fine-tuning. Call 7 ran the CUDA local pass there (float32
# values with bf16 keys) and moved the ratios by 0.01 at most (0.56x with 64 layers, 0.89x with 8), so one more step
# of each model under torch.profiler (--profile 45), all 64 layers upgraded so that the upgraded layers' own kernels
# stand out, with PALIMPSA_CHUNKED_LOCAL=cuda as call 7 (and the Triton corrections, as then).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-mma-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
export PALIMPSA_CHUNKED_LOCAL=cuda PALIMPSA_CHUNKED_CORRECT=triton
timeout 400 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --profile 45 > $out/profile64.log 2>&1
echo "profile64 exit $? at $(( $(date +%s) - start )) s"; grep -v "^\[" $out/profile64.log | tail -110
