# Fourth call: the adjoints kept as dM / G, dI / G (AGAUGE 1, timing; G the decays since the chunk's end,
# renormalised below 2^-40), so that dI's update is one FFMA (dI/G -= (tq/G) mu) instead of a multiply and an FFMA:
# 32 instructions fewer a token and lane in each copy of the reverse step, about 9 more outside it. check_local.py's
# seven cases under AGAUGE 1; the local pass, default against AGAUGE 1, interleaved, 8 rounds; where AGAUGE is faster
# in the fine-tuning mix, fine-tuning with 8 layers upgraded under it (train_defines.py, --rounds 2).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines AGAUGE=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:AGAUGE=1" --rounds 8 \
  > $out/time_agauge.log 2>&1
echo "time_agauge exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/time_agauge.log
wins=$(python3 - $out/time_agauge.log <<'PY'
import re, sys
ms = {}
for line in open(sys.argv[1]):
    m = re.match(r"mix .*?(\(default macros\)|AGAUGE=1)\s*: local pass ([0-9.]+)", line)
    if m:
        ms[m.group(1)] = float(m.group(2))
print(1 if len(ms) == 2 and ms["AGAUGE=1"] < ms["(default macros)"] else 0)
PY
)
grep -q "^0 checks failed" $out/check.log || wins=0
echo "AGAUGE wins: $wins"
left=$(( 560 - ($(date +%s) - start) ))
if [ "$wins" = 1 ] && [ $left -gt 200 ]; then
  CUDA_DEFINES=AGAUGE=1 timeout $left python3 docs/bench/w16-2026-11-29/train_defines.py --upgraded 8 \
    --seq-lens 8192 --tf32 --rounds 2 --json $out/train8_agauge.json > $out/train8_agauge.log 2>&1
  echo "train8_agauge exit $? at $(( $(date +%s) - start )) s"
  grep -E "^  8192|round|rounds|CUDA_DEFINES" $out/train8_agauge.log
fi
