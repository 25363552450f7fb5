# Third call: the split choice now counts whole walks at the 12-an-SM preset (_whole_cost, PRESET_SPEED) and float32
# inputs' costlier corrections (CORRECTIONS_FLOAT32), so at B = 1 float32 under TF32 walks whole at L = 2048, 8192
# and 16384 (the last never measured), bf16 keeps its splits. The new auto against the old choice
# (WHOLE_OCCUPANCY=0: whole walks costed at 8 an SM, so the splits win), float32 under TF32; then how the local pass's
# speed depends on its warps a scheduler: LOCAL_PROGRAMS_PER_SM 4 (one one-warp program a scheduler, twice the rounds)
# against the default 8 (two), bf16; then fine-tuning at full precision (64 layers, one document a row: whole walks
# at 12 an SM by default against WHOLE_OCCUPANCY=0, 8 an SM), interleaved, which call 8 of tf32x3-2026-11-28 cut short.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/start-ahead-2026-11-28/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 150 python3 scripts/bench_scan.py --no-step --float32 --shapes 1x16384,1x8192,1x2048 \
  --backends "chunked,chunked@WHOLE_OCCUPANCY=0" --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|^ +chunked" $out/bench-f32.log | tail -9
timeout 100 python3 scripts/bench_scan.py --no-step --breakdown --shapes 1x8192 \
  --backends "chunked,chunked@LOCAL_PROGRAMS_PER_SM=4" --json $out/bench-occ.json > $out/bench-occ.log 2>&1
echo "bench occupancy exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local" $out/bench-occ.log | tail -4
left=$(( 540 - ($(date +%s) - start) ))
timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded 64 --full-precision --rounds 3 \
  --steps 2 --arm auto= --arm whole8=WHOLE_OCCUPANCY=0 > $out/ab64.log 2>&1
echo "ab 64 exit $? at $(( $(date +%s) - start )) s"; tail -6 $out/ab64.log
