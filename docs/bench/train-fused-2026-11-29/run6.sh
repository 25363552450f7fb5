# Sixth call: fine-tuning as it stands (the convolution's backward of call 4), three rounds each with 8 and with 64
# layers upgraded, the first round's steps also profiled (--profile: the ratio of the two models' GPU kernel time a
# step beside the tokens/s ratios), on the Triton cache of call 1.
# Run from the repository root with .bench_deps and triton-cache.tgz beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 3 --profile 4 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds|fastest|GPU kernels|profile of" $out/train8.log | cut -c1-250
timeout 250 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 --profile 4 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds|fastest|GPU kernels|profile of" $out/train64.log | cut -c1-250
