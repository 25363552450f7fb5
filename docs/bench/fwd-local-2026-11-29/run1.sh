# First call: the chunked forward's launches per tiling of its local pass (fwd_parts.py), then fine-tuning with all
# 64 layers upgraded (bench_train.py --rounds 3) with the GPU's clocks, power and throttle reasons sampled during the
# timed steps. Run from the repository root with .bench_deps beside it:
# OUT=dir bash docs/bench/fwd-local-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 240 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --rounds 6 \
  --tilings="-,BP=64,BT=64,BP=64:BT=64,BP=64:local_warps=8,stages=1" > $out/fwd_parts.log 2>&1
echo "fwd_parts exit $? at $(( $(date +%s) - start )) s"; cut -c1-250 $out/fwd_parts.log | grep -v Warning | tail -20
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds|clock|MHz" $out/train64.log | cut -c1-250
