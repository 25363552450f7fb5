# First call (2026-11-27): dv, dbeta (and the forward's y) stored from the row sums' own layout (DIRECT: no
# shared-memory round trip and barrier a store) and the slab's block start prefetched too (PREFETCH=2); the float64
# checks with DIRECT on, both timed against the default, and where the local pass's stalls sit (ncu's source
# counters, SASS level). At the call DIRECT was on by default; the backends here name it.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config DIRECT=1 \
  --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,fwd[DIRECT=1]:chunked@DIRECT=1,fwd[DIRECT=1]:chunked@PREFETCH=2:DIRECT=1,chunked@PREFETCH=2" \
  --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -10
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends \
  "triton,fwd-seq[BV=8:TRANS=1:UNROLL=1:num_warps=1:DIRECT=1]:sequential@DIRECT=1,sequential@PREFETCH=2:DIRECT=1" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
rep=$(mktemp -d)/local
timeout 100 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section WarpStateStats \
  --section SchedulerStats --section SourceCounters -o $rep python3 scripts/bench_scan.py --profile \
  --backends chunked@DIRECT=1 > /dev/null 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $rep.ncu-rep --page raw --csv > $out/ncu-raw.csv 2>&1
ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
python3 scripts/ncu_source_digest.py $rep-source.csv 60 > $out/ncu-digest.txt 2>&1
grep -E "by reason|by opcode" $out/ncu-digest.txt
