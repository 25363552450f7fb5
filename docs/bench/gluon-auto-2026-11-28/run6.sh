# Sixth call: question (1) of run5.sh, where the fine-tuning step's GPU waits with the Gluon local pass.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 80 python3 docs/bench/gluon-auto-2026-11-28/launch_overhead.py > $out/launch.log 2>&1
echo "launch exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/launch.log
for local in triton auto; do
  PALIMPSA_CHUNKED_LOCAL=$local timeout 85 python3 docs/bench/gluon-auto-2026-11-28/step_gaps.py --upgraded 8 \
    > $out/gaps-$local.log 2>&1
  echo "gaps $local exit $? at $(( $(date +%s) - start )) s"; head -6 $out/gaps-$local.log
done
