# kernel call 1: the chunk-parallel backward checked in float64 and timed against the sequential one and SSD
source "$(dirname "$0")/../setup.sh"
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --quick --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; tail -8 $out/check-chunked.log
timeout 330 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends triton,chunked,chunked@NSPLIT=4,chunked@BV=4:NSPLIT=8,chunked@DOT=tf32x3 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -32
