# Sixth call: what pass A's 0.84 ms (call 5, CUDA_PROBE 8) is made of: its 64 KB slab stores a segment all into one
# slot, which stays in L2 (CUDA_PROBE 64), or not stored (128); timing probes, wrong gradients.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
# (call 6 ran "0:,8:,64:,128:" before BULKA existed; since BULKA 1 is the default, the same builds are BULKA=0's,
# byte-identical, and the source refuses probes 64 and 128 under BULKA 1)
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:BULKA=0,8:BULKA=0,64:BULKA=0,128:BULKA=0" --rounds 8 \
  > $out/probes.log 2>&1
echo "probes exit $? at $(( $(date +%s) - start )) s"; grep "local pass" $out/probes.log
