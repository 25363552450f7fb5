# Second call: where the dq, dk atomics of the CUDA local pass (and the dk atomics of the CUDA corrections) wait.
# By default a chunk's 80 heads run at once and add into the same 256 floats a token; CUDA_ORDER=1 takes the work
# items chunks first (the CTAs running at once spread over all chunks), CUDA_REPL=4 gives the scratch 4 copies (head h
# adds into copy h % 4, summed after), CORRECT_ORDER=1 the corrections' CTAs chunks first. Then the Gluon local pass
# against float64 on check_local.py's mixed-dtype case (float32 values, bf16 keys), whose dk, dq the CUDA pass got
# within 1.4e-3 and 1.7e-3 (call 1, tolerance 1e-3).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-correct-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
b="chunked@LOCAL=cuda"
timeout 170 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "$b,$b:CUDA_ORDER=1,$b:CUDA_REPL=4,$b:CUDA_ORDER=1:CUDA_REPL=4,$b:CORRECT_ORDER=1" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -15 $out/bench-b1.log
timeout 60 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --gluon --cases 6 > $out/check-gluon.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -v "^$" $out/check-gluon.log | tail -22
