# kernel call 1: the chunk-parallel backward checked in float64 and timed against the sequential one and SSD
set -u
out=$OUT/k; mkdir -p $out
site=$(mktemp -d); mkdir -p $site/palimpsa && touch $site/palimpsa/__init__.py
ln -s $PWD/upgrade $site/palimpsa/upgrade && ln -s $PWD/kernels $site/palimpsa/kernels
export PYTHONPATH=$site:$PWD/.bench_deps/site TRITON_DEFAULT_FP_FUSION=1
tar xzf triton-cache.tgz 2>/dev/null; export TRITON_CACHE_DIR=$PWD/.triton-cache TRITON_CACHE_AUTOTUNING=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
timeout 150 python3 scripts/check_scan_gpu.py --backend triton-chunked --quick --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; tail -8 $out/check-chunked.log
timeout 330 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends triton,chunked,chunked@NSPLIT=4,chunked@BV=4:NSPLIT=8,chunked@DOT=tf32x3 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -32
