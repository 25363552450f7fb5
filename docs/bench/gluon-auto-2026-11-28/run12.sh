# Written after call 11, when that session's device time had run out; run as call 12 in the next session. Twelfth call: more programs an
# SM for the Gluon local pass. Call 11's ninth program ran as a second wave because a one-warp program's registers
# come from one scheduler's file (gluon_local.resident_programs: 2 a scheduler at 169-224 registers, 3 at 129-168).
# Capped at 168 (LOCAL_MAXNREG; no spills under Triton 3.5.1-3.9 at SEG 4, nor at SEG 2 in bf16; SEG 2 in float32
# keeps 16-32 bytes of stack), SEG 4 fits 9 an SM in bf16 (shared memory) and SEG 2 fits 12 in bf16 and float32. Their gradients (compare.py), then the local pass timed beside the default:
# the cap alone (8 an SM), 9 an SM, and SEG 2 at 12 an SM with two NSPLITs; the memory column shows the slab's
# growth (one slab a resident program).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run12.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
STAGE=3 PIPE=1 L2PF=4 SEG=2 MAXNREG=168 PROGRAMS=12 timeout 110 python3 docs/bench/gluon-local-2026-11-27/compare.py \
  > $out/compare-seg2-168.log 2>&1
echo "compare exit $? at $(( $(date +%s) - start )) s"; grep -c FAIL $out/compare-seg2-168.log
timeout 230 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --backends \
  "chunked,chunked@LOCAL_MAXNREG=168,chunked@LOCAL_MAXNREG=168:PROGRAMS_PER_SM=9:NSPLIT=8,chunked@SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12:NSPLIT=8,chunked@SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12:NSPLIT=16" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench.log | tail -6
left=$(( 585 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --float32 --backends \
  "chunked,chunked@SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12:NSPLIT=8,chunked@SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12:NSPLIT=16" \
  --json $out/bench-f32.json > $out/bench-f32.log 2>&1
echo "bench f32 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench-f32.log | tail -4
