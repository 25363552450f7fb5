# Third call: where an upgraded layer's time goes in fine-tuning now (8 layers upgraded, one profiled step of each
# model, the 40 slowest kernels), then the scan with float32 inputs beside SSD with the launches' breakdown.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --profile 40 > $out/profile8.log 2>&1
echo "profile exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|profile of|palimpsa|scan [0-9]" $out/profile8.log
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 --backends chunked --float32 \
  --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +[a-z@_=0-9]+ +[0-9]+ +[0-9]+ \||local " $out/bench-f32.log
