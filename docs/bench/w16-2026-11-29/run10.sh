# Tenth call: one copy of the reverse step (ONECOPY 1, timing), which peels every token, by zero weights where the
# token's state came from a product: 4,584 instructions in the kernel against 5,248, no branch between two copies a
# token (call 7: the token loop's own 42 instructions took 7.7% of the stall samples, on branches and the factors'
# load). check_local.py's seven cases under ONECOPY; the local pass, default against ONECOPY, interleaved, 8 rounds.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run10.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines ONECOPY=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:ONECOPY=1" --rounds 8 \
  > $out/time_onecopy.log 2>&1
echo "time_onecopy exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/time_onecopy.log
