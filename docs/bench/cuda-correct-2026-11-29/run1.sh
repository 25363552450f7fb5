# First call: the CUDA corrections (kernels/cuda_correct.py) on a GPU for the first time. check_local.py --correct
# runs its seven cases with the CUDA local pass and then the CUDA corrections against float64, and against the
# Triton corrections; then the chunk-parallel backward's launches timed with each (B = 1, L = 8192, bf16 and float32
# with TF32, --breakdown), forward + backward at B = 4 and L = 16384, and fine-tuning with 8 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-correct-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --correct > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed|run:" $out/check.log | head -40
grep -E " vs " $out/check.log | sort -k6 -g | tail -3
b="chunked@LOCAL=cuda"
timeout 100 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b:CORRECT=triton,$b:CORRECT=cuda" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -12 $out/bench-b1.log
timeout 100 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 --float32 \
  --backends "$b:CORRECT=triton,$b:CORRECT=cuda" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; tail -12 $out/bench-f32.log
timeout 100 python3 scripts/bench_scan.py --no-step --shapes 4x8192,1x16384 \
  --backends "$b:CORRECT=triton,$b:CORRECT=cuda" --json $out/bench-more.json > $out/bench-more.log 2>&1
echo "bench more exit $? at $(( $(date +%s) - start )) s"; tail -8 $out/bench-more.log
left=$(( 560 - ($(date +%s) - start) ))
PALIMPSA_CHUNKED_LOCAL=cuda PALIMPSA_CHUNKED_CORRECT=cuda timeout $left python3 scripts/bench_train.py --upgraded 8 \
  --seq-lens 8192 --tf32 > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|RUNS" $out/train8.log
