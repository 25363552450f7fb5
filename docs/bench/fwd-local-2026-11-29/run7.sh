# Seventh call: pass A's slab states stored by the tensor memory accelerator (BULKA 1, the working tree's default
# while this ran: put into a state slot, which pass B alone uses, and one bulk copy of 64 KB a segment into the slab)
# against the threads' own stores (BULKA 0, byte-identical to the commit before). check_local.py's seven cases with
# BULKA 1; the local pass, the two interleaved, 8 rounds.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:BULKA=0,0:" --rounds 8 \
  > $out/probes.log 2>&1
echo "probes exit $? at $(( $(date +%s) - start )) s"; grep "local pass" $out/probes.log
