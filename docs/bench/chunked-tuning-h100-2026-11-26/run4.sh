# Fourth H100 call (2026-11-26), after the one-warp tiling took TRANS (Triton then keeps a channel's N elements in
# 4 lanes) and the forward's state loads stopped fixing the layout (fused_recurrent._loose): the float64 checks as
# auto dispatches and with the chunk-parallel forward forced everywhere; a few more tilings; the scan at B = 1 and 4,
# L = 2k / 8k / 16k, beside the sequential forward with the four-warp tiling and SSD. Run from the repository root
# with .bench_deps beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 80 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 80 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --forward chunked \
  --json $out/check-chunked-fwd.json > $out/check-chunked-fwd.log 2>&1
echo "check chunked exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked-fwd.log | tail -4
b4="triton,fwd-seq[BV=16:num_warps=2:UNROLL=1]:triton,fwd-seq[BV=8:num_warps=1:UNROLL=2]:triton,fwd[]:triton"
b1="chunked,fwd[walk_UNROLL=2]:chunked,fwd[walk_BV=16:walk_warps=2]:chunked"
for group in b4 b1; do
  shape=$([ $group = b4 ] && echo 4x8192 || echo 1x8192)
  timeout 120 python3 scripts/bench_scan.py --no-step --shapes $shape --backends "${!group}" \
    --json $out/bench-$group.json > $out/bench-$group.log 2>&1
  echo "bench $group exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-$group.log
done
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --backends triton,fwd-seq:triton --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -A 12 "^bf16, H=" $out/bench.log || tail $out/bench.log
