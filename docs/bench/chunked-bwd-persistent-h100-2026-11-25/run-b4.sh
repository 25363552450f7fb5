# B = 4 (where SSD is no longer launch-bound): the Gluon forward with the default backward (auto: sequential here,
# an unsplit grid fills the GPU), the Triton forward, and the chunk-parallel backward split in two
# OUT=dir bash docs/bench/chunked-bwd-persistent-h100-2026-11-25/run-b4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 220 python3 scripts/bench_scan.py --no-step --shapes 4x2048,4x8192 --backends gluon,triton,chunked@NSPLIT=2 --json $out/bench-b4.json > $out/bench-b4.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $out/bench-b4.log | tail -14
