# Second call: the chunked forward's launches per tiling of its local pass (fwd_parts.py; run1.sh's first line of
# it failed on the list's leading '-', fixed in both). Run from the repository root with .bench_deps beside it:
# OUT=dir bash docs/bench/fwd-local-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --rounds 6 \
  --tilings="-,BP=64,BT=64,BP=64:BT=64,BP=64:local_warps=8,stages=1" > $out/fwd_parts.log 2>&1
echo "fwd_parts exit $? at $(( $(date +%s) - start )) s"; cut -c1-250 $out/fwd_parts.log | grep -v Warning | tail -20
