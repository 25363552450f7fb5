# First call: 16 warps a CTA (W16=1) on a GPU for the first time. check_local.py's seven cases under W16; the local
# pass, default against W16, interleaved, 8 rounds; and where W16 is faster in the fine-tuning mix, fine-tuning with
# 8 layers upgraded under W16 (bench_train.py --rounds 2 through train_defines.py).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick --defines W16=1 > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 120 python3 docs/bench/hsum-2026-11-29/time_probes.py --variants "0:,0:W16=1" --rounds 8 \
  > $out/time_w16.log 2>&1
echo "time_w16 exit $? at $(( $(date +%s) - start )) s"; tail -4 $out/time_w16.log
wins=$(python3 - $out/time_w16.log <<'PY'
import re, sys
ms = {}
for line in open(sys.argv[1]):
    m = re.match(r"mix .*?(\(default macros\)|W16=1)\s*: local pass ([0-9.]+)", line)
    if m:
        ms[m.group(1)] = float(m.group(2))
print(1 if len(ms) == 2 and ms["W16=1"] < ms["(default macros)"] else 0)
PY
)
grep -q "^0 checks failed" $out/check.log || wins=0
echo "W16 wins: $wins"
left=$(( 560 - ($(date +%s) - start) ))
if [ "$wins" = 1 ] && [ $left -gt 200 ]; then
  CUDA_DEFINES=W16=1 timeout $left python3 docs/bench/w16-2026-11-29/train_defines.py --upgraded 8 --seq-lens 8192 \
    --tf32 --rounds 2 --json $out/train8_w16.json > $out/train8_w16.log 2>&1
  echo "train8_w16 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|rounds|CUDA_DEFINES" $out/train8_w16.log
fi
