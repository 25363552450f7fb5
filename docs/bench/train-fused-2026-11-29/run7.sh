# Seventh call: where the host's time goes in a fine-tuning step, the plain model and 8 layers upgraded
# (host_profile.py, cProfile), on the Triton cache of call 1.
# Run from the repository root with .bench_deps and triton-cache.tgz beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/train-fused-2026-11-29/host_profile.py > $out/host_profile.log 2>&1
echo "profile exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/host_profile.log | cut -c1-200 | head -120
