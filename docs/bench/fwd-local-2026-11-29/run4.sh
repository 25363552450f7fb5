# Fourth call: the local pass in SUFFIX form (the default while this ran) with its states in blocks (BK, a new key:
# more programs resident, each with fewer accumulators) against the whole 128 states a program.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --rounds 6 \
  --tilings="-,BK=64,BK=32,BK=64:BP=64,BK=32:BP=64,BK=64:local_warps=2,BK=64:BT=64,SUFFIX=0" > $out/fwd_parts.log 2>&1
echo "fwd_parts exit $? at $(( $(date +%s) - start )) s"; cut -c1-180 $out/fwd_parts.log | grep -v Warning | tail -24
