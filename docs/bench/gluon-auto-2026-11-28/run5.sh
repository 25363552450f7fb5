# Fifth call: questions (2) and (3) below; the sixth call (run6.sh) asks (1).
# STAGE_A was taken out of the kernel after this call: repeat its rows at commit c78be39, the last with it.
# (1) call 4's profiled steps put the scan kernels 8 ms a step faster with the Gluon local pass (121.2 ms against
#     129.2, 8 layers) but the step 20 ms slower, the GPU idle 47 ms a step against 19. Where does the GPU wait?
#     The host time to enqueue one forward + backward with each pass, and one profiled fine-tuning step's gaps
#     between kernels with each pass.
# (2) Added after the calls: STAGE_A, pass A's inputs copied to shared memory a block ahead. Do its gradients pass
#     compare.py?
# (3) How fast is the pass with L2PF and with STAGE_A? Call 3's ncu profile waits 570-709 cycles a block at the
#     barrier after pass B's copies (L2PF 1: the next block's staged inputs in L2), 246-304 cycles four times a
#     block in pass B on a global load, likely the block's start state from the slab (L2PF 4: the next one in L2),
#     and 298-571 cycles once a block on each of pass A's loads (STAGE_A).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
STAGE=3 PIPE=1 STAGE_A=1 timeout 110 python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-stage-a.log 2>&1
echo "compare STAGE_A exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-stage-a.log
timeout 220 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked@LOCAL=triton,chunked@LOCAL=gluon,chunked@LOCAL=gluon:L2PF=1,chunked@LOCAL=gluon:L2PF=4,chunked@LOCAL=gluon:L2PF=5,chunked@LOCAL=gluon:STAGE_A=1,chunked@LOCAL=gluon:STAGE_A=1:L2PF=5" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "local " $out/bench.log | tail -8
