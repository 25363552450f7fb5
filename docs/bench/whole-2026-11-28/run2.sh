# Second call (same machine as the first): the final build of docs/bench/rescaled-walk-2026-11-28 timed at last, the
# default against the 12-an-SM preset's keys (bf16 and float32, B = 1, L = 8192, with the backward's launches), and
# WHOLE against the sequential Triton backward at B = 4, L = 2048 and 16384 (where nothing splits).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/whole-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
P12=SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0
for dt in bf16 f32; do
  flag=; [ $dt = f32 ] && flag=--float32
  left=$(( 585 - ($(date +%s) - start) ))
  timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown $flag \
    --backends "chunked,chunked@$P12" --json $out/bench-$dt.json > $out/bench-$dt.log 2>&1
  echo "bench $dt exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local |chunked.* 8192 \|" $out/bench-$dt.log | tail -5
done
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 4x2048,4x16384 --backends "chunked,chunked@WHOLE=0" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench B4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|chunked.* \|" $out/bench-b4.log | tail -6
