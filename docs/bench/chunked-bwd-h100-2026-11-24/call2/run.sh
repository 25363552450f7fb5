# kernel call 2: the chunk-parallel backward (exact decay sums, TF32 corrections for bf16) checked and timed
source "$(dirname "$0")/../setup.sh"
timeout 170 python3 scripts/check_scan_gpu.py --backend triton-chunked --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked.log | tail -12
timeout 230 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends triton,chunked,chunked@NSPLIT=8,chunked@NSPLIT=16,chunked@BP=32 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -25
left=$(( 580 - ($(date +%s) - start) ))
PALIMPSA_SCAN_BACKEND=gluon PALIMPSA_TRITON_BACKWARD=chunked timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --json $out/train64-gluon-chunked.json > $out/train64-gluon-chunked.log 2>&1
echo "train exit $? at $(( $(date +%s) - start )) s"; tail -6 $out/train64-gluon-chunked.log
