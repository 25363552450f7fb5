# Fourth call: call 3 found the rescaled walk a loss at 8 programs an SM (float32 local pass 10.79 ms against 10.73
# without it; bf16 11.22 against 11.18) and a gain at the 12-an-SM preset (10.22 against 10.42), and L2PF bit 8
# (the next start state in L1) a loss everywhere (taken out again). So the defaults became WALK_RESCALE 0, WIDEN 1, and
# the preset (PALIMPSA_GLUON_LOCAL_PROGRAMS=12) also sets WALK_RESCALE 1 and WIDEN 0 (WIDEN makes the bf16 kernel
# spill under the 168-register cap). This call: the preset's gradients (compare.py), then the new defaults against
# the preset with scan checkpoints every 512 tokens (the default) and every 256 (half the preset's scratch slab, twice
# the checkpoints), bf16 and float32, B = 1, L = 8192, with peak memory.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
SEG=2 MAXNREG=168 PROGRAMS=12 STAGE=3 PIPE=1 L2PF=4 WALK_RESCALE=1 WIDEN=0 timeout 150 \
  python3 docs/bench/gluon-local-2026-11-27/compare.py > $out/compare-preset.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-preset.log; grep -E "FAIL|runs|rror" $out/compare-preset.log | tail -3
P12=SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0
for ct in 512 256; do
  for dt in bf16 f32; do
    flag=; [ $dt = f32 ] && flag=--float32
    extra=; [ $dt$ct = bf16512 ] && extra=",chunked@$P12:WIDEN=1"
    left=$(( 590 - ($(date +%s) - start) ))
    timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown $flag --chunk-size $ct \
      --backends "chunked,chunked@$P12$extra" --json $out/bench-$dt-ct$ct.json > $out/bench-$dt-ct$ct.log 2>&1
    echo "bench $dt CT $ct exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local |chunked.* 8192 \|" $out/bench-$dt-ct$ct.log | tail -7
  done
done
