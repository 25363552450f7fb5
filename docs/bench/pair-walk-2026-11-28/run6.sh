# Sixth call: the chunk walk without its register pipeline (walk_PF=1: each token's inputs loaded where it starts,
# 7 fewer instructions a token), and with L1 prefetches of the token PFD ahead instead (walk_PF=2; 30 more), against
# the default, forward only.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
ab=docs/bench/pair-walk-2026-11-28/walk_ab.py
all="--variant base= --variant pf1=walk_PF=1 --variant pf2=walk_PF=2 --variant pf2d4=walk_PF=2:walk_PFD=4"
timeout 150 python3 $ab $all --rounds 5 > $out/ab-bf16-b1.log 2>&1
echo "ab bf16 b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "ms|against" $out/ab-bf16-b1.log | tail -8
timeout 100 python3 $ab $all --shapes 4x8192 --rounds 3 > $out/ab-bf16-b4.log 2>&1
echo "ab bf16 b4 exit $? at $(( $(date +%s) - start )) s"; grep -E " ms " $out/ab-bf16-b4.log | tail -4
