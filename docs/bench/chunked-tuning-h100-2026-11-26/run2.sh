# Second H100 call (2026-11-26), after the chunk walk's tiling became one warp of eight channels: the forwards at
# B = 4 (the sequential one with its own tiling and with the walk's, the chunk-parallel one) and a sixteen-channel
# walk at B = 1, beside SSD; then fine-tuning with 8 of 64 layers upgraded. Run from the repository root with
# .bench_deps and .whl (pydantic for the model code) beside it:
#   OUT=dir bash docs/bench/chunked-tuning-h100-2026-11-26/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
b4="triton,fwd-seq[BV=8:num_warps=1:UNROLL=1]:triton,fwd[]:triton"
b1="chunked,fwd[walk_BV=16:walk_warps=1]:chunked"
for group in b4 b1; do
  shape=$([ $group = b4 ] && echo 4x8192 || echo 1x8192)
  timeout 150 python3 scripts/bench_scan.py --no-step --shapes $shape --backends "${!group}" \
    --json $out/bench-$group.json > $out/bench-$group.log 2>&1
  echo "bench $group exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-$group.log
done
timeout 330 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --json $out/train8.json \
  > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; tail -3 $out/train8.log
