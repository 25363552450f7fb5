# Fifth call: where the upgraded 64-layer model's step-to-step spread comes from (time_steps.py: the host's issue
# time, the wall time and the backward's launches of each step, with the garbage collector on, off, on).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 400 python3 docs/bench/pipea-2026-11-29/time_steps.py > $out/steps.log 2>&1
echo "steps exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/steps.log | cut -c1-260 | tail -20
