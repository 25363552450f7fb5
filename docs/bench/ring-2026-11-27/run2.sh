# Second call (2026-11-27): float32 copies of the keys and queries (KQ32: the local pass's walks and steps, and with
# walk_KQ32 the forward's chunk walk, read them without unpacking bf16; a copy is B x T x G x N floats, 4 MB at
# B = 1, L = 8192, one group). Float64 checks with both on and the chunked forward and backward forced (the
# defaults set by hand), then the scan timed side by side at B = 1 and 4, L = 8192.
# (KQ32 was off by default in that call: at a later commit "chunked" there reads fwd[walk_KQ32=0]:chunked@KQ32=0)
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 -c "
import runpy, sys
from palimpsa.kernels import chunked_bwd, chunked_fwd
chunked_bwd.CHUNKED_CONFIG['KQ32'] = True
chunked_fwd.CHUNKED_FWD_CONFIG['walk_KQ32'] = 1
sys.argv = ['check_scan_gpu.py', '--quick', '--backend', 'triton-chunked', '--forward', 'chunked',
            '--json', '$out/check-kq32.json']
runpy.run_path('scripts/check_scan_gpu.py', run_name='__main__')" > $out/check-kq32.log 2>&1
echo "check kq32 exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-kq32.log | tail -4
timeout 300 python3 scripts/bench_scan.py --no-step --shapes 1x8192,4x8192 --breakdown \
  --backends "chunked,chunked@KQ32=1,fwd[walk_KQ32=1]:chunked,fwd[walk_KQ32=1]:chunked@KQ32=1" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^ +B=|local " $out/bench.log | tail -12
