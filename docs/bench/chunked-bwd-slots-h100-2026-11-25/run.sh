# the chunk-parallel backward with fewer slots: local programs no more than their rounds need, the slab without the
# chunk's checkpoint, no adjoint slot for a sequence's last chunk; checks both Triton backwards (they share the chunk
# body) and times the chunked one against SSD at B = 1;
# run from the repository root: OUT=dir bash docs/bench/chunked-bwd-slots-h100-2026-11-25/run.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
for backend in triton-chunked triton-sequential; do
  timeout 100 python3 scripts/check_scan_gpu.py --backend $backend --quick --json $out/check-$backend.json \
    > $out/check-$backend.log 2>&1
  echo "check $backend exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-$backend.log | tail -4
done
timeout 200 python3 scripts/bench_scan.py --quick --no-step --breakdown --backends chunked --json $out/bench.json \
  > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench.log | tail -16
