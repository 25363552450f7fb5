# Not run: the session's device time ran out before this call (docs/bench/gluon-auto-2026-11-28/README.md).
# Fifth call (for the next session): (1) call 4's profiled steps put the scan kernels 8 ms a step faster with the
# Gluon local pass (121.2 ms against 129.2, 8 layers) but the step 20 ms slower, the GPU idle 47 ms a step against
# 19: is there a host stall per Gluon launch? The host time to enqueue one forward + backward with each local pass.
# (2) L2PF, added after the calls: call 3's ncu profile of the Gluon pass waits ~700 cycles a block at the barrier
# after its copies (pass B prefetches nothing at STAGE 3) and ~300 cycles a pair on pass A's loads; L2PF 1 asks for
# the next block's staged inputs in L2, 2 sends pass A's prefetches to L2, 3 both.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 120 python3 docs/bench/gluon-auto-2026-11-28/launch_overhead.py > $out/launch.log 2>&1
echo "launch exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/launch.log
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@LOCAL=triton,chunked@LOCAL=gluon,chunked@LOCAL=gluon:L2PF=1,chunked@LOCAL=gluon:L2PF=2,chunked@LOCAL=gluon:L2PF=3" \
  --json $out/bench-l2pf.json > $out/bench-l2pf.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-l2pf.log | tail -8
