# Fifth H100 call (2026-11-26), the final tilings (the chunk walk in chunked_fwd.WALK_CONFIG, the sequential
# forward in fused_recurrent.ONE_WARP_FWD_CONFIG from 8 programs an SM): the float64 checks as auto dispatches and
# with the chunk-parallel forward forced everywhere; with initial states in (the sequential forward's state loads go
# through fused_recurrent._loose); the scan at B = 1 and 4, L = 2k / 8k / 16k, beside the sequential forward with
# the four-warp tiling (fwd-seq:triton) and SSD; fine-tuning with 8 of 64 layers upgraded. Run from the repository
# root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 80 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 80 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --forward chunked \
  --json $out/check-chunked-fwd.json > $out/check-chunked-fwd.log 2>&1
echo "check chunked exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked-fwd.log | tail -4
timeout 60 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,state:triton" \
  --json $out/bench-state.json > $out/bench-state.log 2>&1
echo "bench state exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-state.log
timeout 200 python3 scripts/bench_scan.py --no-step --backends triton,fwd-seq:triton --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -A 12 "^bf16, H=" $out/bench.log || tail $out/bench.log
left=$(( 590 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train8.log
