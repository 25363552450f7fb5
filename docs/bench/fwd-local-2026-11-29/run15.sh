# Fifteenth call: the CUDA forward local pass as committed to be the default (auto on compute capability 9.x; warpgroup
# products on sm_90a; each thread's copies from one running pointer per tensor, no spills in any dtype):
# check_scan_gpu.py --quick --without-uncertainty as auto dispatches; fwd_parts.py (Triton's local pass, the mma.sync
# form, the warpgroup form); bench_scan.py at B = 1 and 4, L = 8192 against SSD; fine-tuning with 8 layers upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/fwd-local-2026-11-29/run15.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 scripts/check_scan_gpu.py --quick --without-uncertainty > $out/check_scan.log 2>&1
echo "check_scan exit $? at $(( $(date +%s) - start )) s"; grep -E "NO$|ERROR|passed|arn" $out/check_scan.log | head -20
timeout 150 python3 docs/bench/fwd-local-2026-11-29/fwd_parts.py --cases bf16:1,bf16:4,mix:1 \
  --tilings="local_CUDA=0,local_CUDA=1:wgmma=0,-" > $out/parts.log 2>&1
echo "parts exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/parts.log | cut -c1-190 | tail -9
timeout 170 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192,4x8192 --backends chunked \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "B=[14] L=8192|floor" $out/bench.log | head -12
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log | cut -c1-250
