# Fifth call: the kernel as committed after call 4 (59b6d49: pass B's token factors from the stage, read a token ahead;
# each segment's start read from the slab; FAC 1 and SLABCP 0 by default). check_local.py's seven cases against
# float64 and the Gluon pass; check_scan_gpu.py --quick --without-uncertainty as auto dispatches; forward + backward
# beside SSD at B = 1, L = 8192 (with CUDA_TSUB 0 and the breakdown), B = 4 and L = 16384.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 docs/bench/cuda-mma-2026-11-29/check_local.py --quick > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|Error|failed" $out/check.log | head -20
grep -E " vs " $out/check.log | sort -k6 -g | tail -2
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed" $out/check_scan.log | head -20
timeout 120 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked@CUDA_TSUB=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +[a-z@_=0-9]+ +[0-9]+ +[0-9]+ \||local " $out/bench-b1.log
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 4x8192,1x16384 --backends chunked \
  --json $out/bench-more.json > $out/bench-more.log 2>&1
echo "bench more exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +[a-z@_=0-9]+ +[0-9]+ +[0-9]+ \|" $out/bench-more.log
