# Ninth call (prepared on the CPU, not yet run): a fine-tuning step with the host taken out, the whole step captured
# as a CUDA graph and replayed, against the same step run eagerly (graph_step.py), 8 and then 64 layers upgraded,
# on the Triton cache of call 1.
# Run from the repository root with .bench_deps and triton-cache.tgz beside it: OUT=dir bash docs/bench/train-fused-2026-11-29/run9.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/train-fused-2026-11-29/graph_step.py --upgraded 8 > $out/graph8.log 2>&1
echo "graph8 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/graph8.log | tail -6 | cut -c1-300
timeout 250 python3 docs/bench/train-fused-2026-11-29/graph_step.py --upgraded 64 > $out/graph64.log 2>&1
echo "graph64 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/graph64.log | tail -6 | cut -c1-300
