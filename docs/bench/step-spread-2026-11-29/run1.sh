# First call: the upgraded 64-layer model's steps under the profiler, one window each (profile_steps.py), twice (two
# model builds, as bench_train.py's rounds build them), to tell whether its slow steps wait or compute slower.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/step-spread-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for build in 1 2; do
  left=$(( 185 * build - ($(date +%s) - start) ))
  timeout $left python3 docs/bench/step-spread-2026-11-29/profile_steps.py --steps 6 > $out/steps$build.log 2>&1
  echo "build $build exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/steps$build.log | cut -c1-330
done
