# Second call (2026-11-27): ncu's source counters (call 1) put a quarter of the local pass's stall samples on
# updates waiting for inputs loaded just before them (the walk from a block start to a pair, and the pair's own
# two steps); PIPELINE=2 loads each pair's inputs one pair ahead. The float64 checks as auto dispatches with it on,
# timed against it off at B = 1 (chunk-parallel) and B = 4 (sequential), and the source counters again.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/chunked-direct-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 130 python3 scripts/check_scan_gpu.py --quick --backend triton-chunked --chunked-config PIPELINE=2 \
  --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -4
timeout 150 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
  --backends "chunked,chunked@PIPELINE=2" --json $out/bench-b1.json > $out/bench-b1.log 2>&1
echo "bench b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local" $out/bench-b1.log | tail -6
timeout 120 python3 scripts/bench_scan.py --no-step --shapes 4x8192 --backends "triton,sequential@PIPELINE=2" \
  --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench b4 exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=" $out/bench-b4.log
rep=$(mktemp -d)/local
timeout 100 ncu --clock-control none -k regex:palimpsa_bwd_local -c 1 --section WarpStateStats \
  --section SchedulerStats --section SourceCounters -o $rep python3 scripts/bench_scan.py --profile \
  --backends chunked@PIPELINE=2 > /dev/null 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $rep.ncu-rep --page source --csv --print-source sass > $rep-source.csv 2>&1
python3 scripts/ncu_source_digest.py $rep-source.csv 40 > $out/ncu-digest.txt 2>&1
ncu -i $rep.ncu-rep --page details > $out/ncu-details.txt 2>&1
grep -E "by reason|by opcode" $out/ncu-digest.txt; grep -E "Issued Warp|No Eligible|Warp Cycles Per Issued|Registers" $out/ncu-details.txt
