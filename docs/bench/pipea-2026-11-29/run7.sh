# Seventh call: whether freezing the objects made before training (gc.collect, then gc.freeze) takes away the
# upgraded 64-layer model's slow steps that fell on a collection of the oldest generation (calls 5-6: 1.91-2.15 s
# against ~1.70), ten steps each way.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pipea-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 250 python3 docs/bench/pipea-2026-11-29/time_steps.py --upgraded 64 --steps 10 --modes "gc on,gc frozen" \
  > $out/steps-frozen.log 2>&1
echo "steps exit $? at $(( $(date +%s) - start )) s"; grep -E "step" $out/steps-frozen.log | cut -c1-100,150-260
