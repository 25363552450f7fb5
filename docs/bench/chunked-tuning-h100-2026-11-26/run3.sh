# Third H100 call (2026-11-26), with the one-warp tiling as the default where the grid fills the GPU (the chunk
# walk; the sequential forward from 8 programs an SM): the float64 checks as auto dispatches, fine-tuning with all
# 64 layers upgraded, and the scan at B = 1 and 4, L = 2k / 8k / 16k, beside the sequential forward with the
# four-warp tiling (fwd-seq:triton: the default before the chunk-parallel forward) and SSD. Run from the
# repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 100 python3 scripts/check_scan_gpu.py --quick --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 290 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --json $out/train64.json \
  > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train64.log
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --backends triton,fwd-seq:triton --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -A 12 "^bf16, H=" $out/bench.log || tail $out/bench.log
