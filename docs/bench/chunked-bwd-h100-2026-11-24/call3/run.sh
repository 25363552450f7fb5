# kernel call 3: defaults BP/warps by precision; training throughput with TF32 allowed, sequential vs chunked
source "$(dirname "$0")/../setup.sh"
timeout 100 python3 scripts/check_scan_gpu.py --backend triton-chunked --quick --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked.log | tail -8
timeout 150 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends triton,chunked,chunked@NSPLIT=2 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -14
for bwd in chunked sequential; do
  [ "$bwd" = chunked ] && left=$(( (590 - ($(date +%s) - start)) / 2 ))
  [ "$bwd" = sequential ] && left=$(( 590 - ($(date +%s) - start) ))
  PALIMPSA_SCAN_BACKEND=gluon PALIMPSA_TRITON_BACKWARD=$bwd timeout $left python3 scripts/bench_train.py --tf32 --upgraded 64 --seq-lens 8192 --json $out/train64-$bwd.json > $out/train64-$bwd.log 2>&1
  echo "train $bwd exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train64-$bwd.log
done
