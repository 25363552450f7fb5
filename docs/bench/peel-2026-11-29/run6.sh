# Sixth call (on call 5's machine, still warm; the session's last 450 s of device time): call 5's B = 1, L = 8192 row,
# which its 120 s limit cut off, then fine-tuning with all 64 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 150 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked@CUDA_TSUB=0,chunked" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +[a-z@_=0-9]+ +[0-9]+ +[0-9]+ \||local " $out/bench-b1.log
left=$(( 400 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|ratio|RUNS" $out/train64.log
