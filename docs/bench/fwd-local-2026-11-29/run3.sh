# Third call: the local pass's SUFFIX form (each token weighted by its decays to the chunk's end, sub-blocks from the
# last, so the products only accumulate; the working tree's default while this ran) against the form before
# (SUFFIX=0) and tilings of it. Run from the repository root with .bench_deps beside it:
# OUT=dir bash docs/bench/fwd-local-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --rounds 6 \
  --tilings="-,SUFFIX=0,BT=64,BT=16,local_warps=8,stages=4,BP=64:local_warps=8,BP=16" > $out/fwd_parts.log 2>&1
echo "fwd_parts exit $? at $(( $(date +%s) - start )) s"; cut -c1-210 $out/fwd_parts.log | grep -v Warning | tail -24
