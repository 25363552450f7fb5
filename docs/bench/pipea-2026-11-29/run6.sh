# Sixth call: is the upgraded 64-layer model's fine-tuning step bound by the host? (call 5: the host issues each step in
# its wall time less 24 ms). The plain model's steps timed the same way, then each model's GPU kernels' time against its
# wall time in one profiled step, and the host's Python functions by time in one step under cProfile.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/pipea-2026-11-29/time_steps.py --upgraded 0 --steps 3 --modes "gc on" --profile 25 \
  > $out/steps-plain.log 2>&1
echo "plain exit $? at $(( $(date +%s) - start )) s"; grep -E "step|wall" $out/steps-plain.log | cut -c1-200 | head -8
timeout 250 python3 docs/bench/pipea-2026-11-29/time_steps.py --upgraded 64 --steps 3 --modes "gc on" --profile 40 \
  > $out/steps-upgraded.log 2>&1
echo "upgraded exit $? at $(( $(date +%s) - start )) s"; grep -E "step|wall" $out/steps-upgraded.log | cut -c1-200 | head -8
grep -A45 "Ordered by: internal time" $out/steps-upgraded.log | cut -c1-180 | head -50
