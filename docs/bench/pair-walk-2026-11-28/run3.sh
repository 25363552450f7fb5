# Third call: the chunk walk with 16 channels a warp (walk_BV=16: 64 state elements a lane instead of 32, so each
# token's loads, loop and scale are shared by twice the elements; its readout a 16-shuffle butterfly, _scatter_rows16)
# at its own 226 registers (8 programs an SM) and capped at 200 (10) and 184 (11), against the default, forward only.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
ab=docs/bench/pair-walk-2026-11-28/walk_ab.py
all="--variant base= --variant bv16=walk_BV=16 --variant bv16r200=walk_BV=16:walk_maxnreg=200
  --variant bv16r184=walk_BV=16:walk_maxnreg=184"
timeout 150 python3 $ab $all --rounds 5 > $out/ab-bf16-b1.log 2>&1
echo "ab bf16 b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "ms|against" $out/ab-bf16-b1.log | tail -8
timeout 100 python3 $ab $all --rounds 3 --float32 > $out/ab-f32-b1.log 2>&1
echo "ab f32 b1 exit $? at $(( $(date +%s) - start )) s"; grep -E " ms " $out/ab-f32-b1.log | tail -4
timeout 100 python3 $ab $all --shapes 4x8192,1x2048 --rounds 3 > $out/ab-bf16-b4.log 2>&1
echo "ab bf16 b4 exit $? at $(( $(date +%s) - start )) s"; grep -E " ms " $out/ab-bf16-b4.log | tail -8
