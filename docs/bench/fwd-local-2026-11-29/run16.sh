# Sixteenth call: fine-tuning with all 64 layers upgraded (bench_train.py --rounds 3) with every default of call 15
# (the forward's local pass in CUDA C++ with warpgroup products, SUFFIX and BULKA), the GPU's clocks read.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run16.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 420 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train64.log | cut -c1-250
