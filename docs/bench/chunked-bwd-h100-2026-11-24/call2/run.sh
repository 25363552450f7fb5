# kernel call 2: the chunk-parallel backward (exact decay sums, TF32 corrections for bf16) checked and timed
set -u
out=$OUT/k; mkdir -p $out
site=$(mktemp -d); mkdir -p $site/palimpsa && touch $site/palimpsa/__init__.py
ln -s $PWD/upgrade $site/palimpsa/upgrade && ln -s $PWD/kernels $site/palimpsa/kernels
export PYTHONPATH=$site:$PWD/.bench_deps/site TRITON_DEFAULT_FP_FUSION=1
tar xzf triton-cache.tgz 2>/dev/null; export TRITON_CACHE_DIR=$PWD/.triton-cache TRITON_CACHE_AUTOTUNING=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $out/machine.txt 2>&1
cat $out/machine.txt
timeout 170 python3 scripts/check_scan_gpu.py --backend triton-chunked --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked.log | tail -12
timeout 230 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends triton,chunked,chunked@NSPLIT=8,chunked@NSPLIT=16,chunked@BP=32 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -25
left=$(( 580 - ($(date +%s) - start) ))
PALIMPSA_SCAN_BACKEND=gluon PALIMPSA_TRITON_BACKWARD=chunked timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --json $out/train64-gluon-chunked.json > $out/train64-gluon-chunked.log 2>&1
echo "train exit $? at $(( $(date +%s) - start )) s"; tail -6 $out/train64-gluon-chunked.log
