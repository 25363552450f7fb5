# Third call: pass A's stages lean (LEANA 1, now the default: only the keys' fragments, values, gains and log decays
# its walk reads, no rows, output gradients or pass B's factors; call 2's ncu put 12.5% of the local pass's stall
# samples in pass A's segment code for 4.6% of its instructions), and a segment's start loaded from the slab before
# pass B's stage (EARLY 1, timing). check_local.py's seven cases with the new default; the local pass, default
# against LEANA 0 (the form before) and EARLY 1, interleaved, 8 rounds; fine-tuning with 8 layers upgraded
# (bench_train.py --rounds 2).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 150 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:LEANA=0,0:EARLY=1" --rounds 8 \
  > $out/time_lean.log 2>&1
echo "time_lean exit $? at $(( $(date +%s) - start )) s"; tail -6 $out/time_lean.log
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds" $out/train8.log
