# the chunk-parallel backward's local pass with persistent programs (one scratch slab per resident program) against
# one program per work item (PROGRAMS_PER_SM=0, the 2026-11-24 launch), with more splits and more programs per SM;
# run from the repository root: OUT=dir bash docs/bench/chunked-bwd-persistent-h100-2026-11-25/run.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 100 python3 scripts/check_scan_gpu.py --backend triton-chunked --quick --json $out/check-chunked.json > $out/check-chunked.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-chunked.log | tail -4
timeout 200 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends chunked@PROGRAMS_PER_SM=0,chunked,chunked@PROGRAMS_PER_SM=9,chunked@NSPLIT=8 --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -22
