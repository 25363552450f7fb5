# One H100 call (2026-11-26): where a fine-tuning step's time goes, 2.7b shapes, L = 8192, 8 of 64 layers upgraded,
# the plain model beside it (bench_train.py --profile). Run from the repository root with .bench_deps and .whl beside
# it: OUT=dir bash docs/bench/train-profile-h100-2026-11-26/run.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 400 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --profile 30 \
  --json $out/train8-profile.json > $out/train8-profile.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -v "^  .* ms .* calls" $out/train8-profile.log | tail -12
grep -A 31 "profile of one step" $out/train8-profile.log | head -70
