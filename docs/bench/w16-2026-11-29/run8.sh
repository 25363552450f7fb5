# Eighth call: two CTAs an SM (C2 1, timing), each of 4 warps over 32 channels (128 threads, 87.5 KB of shared memory
# in bf16: one state slot, the state before token 8 walked to from the segment's start where a product needs it, no
# squared keys' rows), so that one CTA's segment code (call 7: 21% of the stall samples for 7% of the instructions,
# every warp waiting at the same barriers) overlaps the other's reverse steps. check_local.py's seven cases under C2;
# the local pass, default against C2, interleaved, 8 rounds; where C2 is faster in the fine-tuning mix, fine-tuning
# with 8 layers upgraded under it (train_defines.py, --rounds 2).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines C2=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:C2=1" --rounds 8 \
  > $out/time_c2.log 2>&1
echo "time_c2 exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/time_c2.log
wins=$(python3 - $out/time_c2.log <<'PY'
import re, sys
ms = {}
for line in open(sys.argv[1]):
    m = re.match(r"mix .*?(\(default macros\)|C2=1)\s*: local pass ([0-9.]+)", line)
    if m:
        ms[m.group(1)] = float(m.group(2))
print(1 if len(ms) == 2 and ms["C2=1"] < ms["(default macros)"] else 0)
PY
)
grep -q "^0 checks failed" $out/check.log || wins=0
echo "C2 wins: $wins"
left=$(( 480 - ($(date +%s) - start) ))
if [ "$wins" = 1 ] && [ $left -gt 200 ]; then
  CUDA_DEFINES=C2=1 timeout $left python3 docs/bench/w16-2026-11-29/train_defines.py --upgraded 8 \
    --seq-lens 8192 --tf32 --rounds 2 --json $out/train8_c2.json > $out/train8_c2.log 2>&1
  echo "train8_c2 exit $? at $(( $(date +%s) - start )) s"
  grep -E "^  8192|round|rounds|CUDA_DEFINES" $out/train8_c2.log
fi
