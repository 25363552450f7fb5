# Seventh call (2026-11-27): call 6's profile showed the rescaled walks' pair waiting ~250 cycles on loads of its own
# inputs, which the branch around the walk had left after it. rescaled-walks-preload.patch adds RESCALE bit 4: the
# pair's own token inputs loaded before the walk. The local pass timed with pass A rescaled (1, the committed
# default), with the walks too (3), and with the preload, walks plain (5) and rescaled (7).
# Run from the repository root with .bench_deps beside it, with rescaled-walks-preload.patch applied to the commit
# that added it (git apply docs/bench/rescaled-2026-11-27/rescaled-walks-preload.patch):
# OUT=dir bash docs/bench/rescaled-2026-11-27/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 250 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@RESCALE=1,chunked@RESCALE=3,chunked@RESCALE=5,chunked@RESCALE=7" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -5
