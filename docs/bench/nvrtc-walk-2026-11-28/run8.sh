# Eighth call: larger batches, where `auto` still takes the sequential forward (a grid of 40 or more one-warp programs
# an SM: B >= 9 at 2.7b shapes): the sequential forward (`triton`) against the chunked forward with the CUDA walk
# (`fwd[walk_CUDA=1]`) and with the Triton walk (`fwd[walk_CUDA=0]`), beside SSD, forward and forward + backward.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/nvrtc-walk-2026-11-28/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 scripts/bench_scan.py --no-step --shapes 16x8192,32x4096 \
  --backends "triton,fwd[walk_CUDA=1]:triton,fwd[walk_CUDA=0]:triton" --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -12 $out/bench.log
