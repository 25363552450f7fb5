# Thirteenth call: call 12 found SEG 2 at 12 programs an SM (LOCAL_MAXNREG 168) faster only with NSPLIT 16, where
# its 20,480 one-chunk work items take 13 rounds over 1,584 programs (NSPLIT 8: 7 rounds of two chunks, 14 chunk
# times), and 9 an SM slower (unbalanced: 3 warps on one scheduler, 2 on the others). Rows: the default, and the
# default with NSPLIT 16 (20 chunk times either way: the round count should not matter at 8 an SM); SEG 2 at 12
# an SM again; SEG 4 unstaged at 12 an SM (16,384 bytes of shared memory, but 216 bytes of stack at 168
# registers); SEG 2 unstaged at 16 an SM (128 registers, 352 bytes of stack). Then L = 16384 (32 chunks): the
# default's NSPLIT 4 (5 rounds of 8 chunks: 40 chunk times) against NSPLIT 32 (39 rounds of one chunk) and SEG 2 at
# 12 an SM with NSPLIT 32 (26 rounds). Last, ncu on SEG 2 at 12 an SM (B = 1, L = 2048): the issue rate with 3
# warps a scheduler, against call 3's 0.58 with 2.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run13.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
S2=SEG=2:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12
timeout 220 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --backends \
  "chunked,chunked@NSPLIT=16,chunked@$S2:NSPLIT=16,chunked@STAGE=0:PIPE=0:LOCAL_MAXNREG=168:PROGRAMS_PER_SM=12:NSPLIT=16,chunked@SEG=2:STAGE=0:PIPE=0:LOCAL_MAXNREG=128:PROGRAMS_PER_SM=16:NSPLIT=16" \
  --json $out/bench-8k.json > $out/bench-8k.log 2>&1
echo "bench 8k exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench-8k.log | tail -6
timeout 200 python3 scripts/bench_scan.py --no-step --shapes 1x16384 --breakdown --backends \
  "chunked,chunked@NSPLIT=32,chunked@$S2:NSPLIT=32" --json $out/bench-16k.json > $out/bench-16k.log 2>&1
echo "bench 16k exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local " $out/bench-16k.log | tail -4
rep=$out/ncu
timeout 100 ncu --clock-control none -k regex:palimpsa_gluon_local -c 1 --section WarpStateStats \
  --section SchedulerStats --section SourceCounters --section SpeedOfLight --section Occupancy \
  -o $rep python3 scripts/bench_scan.py --profile --backends "chunked@$S2" > $out/ncu.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $rep.ncu-rep --page details > $out/ncu-details.txt 2>&1
ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
python3 scripts/ncu_source_digest.py $rep-source.csv 30 > $out/digest.txt 2>&1
rm -f $rep.ncu-rep $rep-source.csv
grep -E "Duration|Issued Warp|No Eligible|Registers Per|Achieved Occ|Active Warps Per|Eligible Warps" $out/ncu-details.txt
head -12 $out/digest.txt
