# First call (2026-11-27): rescaled walks (RESCALE, on by default) in the forward (every chunk walked in rescaled
# states, renormalised past e^20) and in the backward's recompute (pass A and the walks to the pairs, over blocks
# whose decays allow it): the float64 checks as auto dispatches and with the chunked forward forced, then at B = 1 the
# forward, forward + backward and the local pass timed without RESCALE and with it, and at B = 4 the one-warp
# sequential forward and the sequential backward without and with it.
# Run from the repository root with .bench_deps beside it, with rescaled-walks.patch applied (the kernels as they were
# then; git apply docs/bench/rescaled-2026-11-27/rescaled-walks.patch): OUT=dir bash docs/bench/rescaled-2026-11-27/run1.sh
# (the call ran with RESCALE on everywhere by default; the keys below ask for what that default was)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 130 python3 scripts/check_scan_gpu.py --quick --forward chunked --json $out/check-chunked-fwd.json \
  > $out/check-chunked-fwd.log 2>&1
echo "check chunked fwd exit $? at $(( $(date +%s) - start )) s"
grep -E " NO|checks passed|rror" $out/check-chunked-fwd.log | tail -4
timeout 190 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "fwd[walk_RESCALE=0]:chunked@RESCALE=0,chunked@RESCALE=3" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench-b1.log | tail -4
one="BV=8:TRANS=1:UNROLL=1:num_warps=1"
timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench_scan.py --no-step --shapes 4x8192 \
  --backends "fwd-seq[$one:RESCALE=0]:sequential@RESCALE=0,fwd-seq[$one:RESCALE=1]:sequential@RESCALE=3" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
