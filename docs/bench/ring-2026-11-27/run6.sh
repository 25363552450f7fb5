# Sixth call (2026-11-27): call 5 again with --profile 25, to see which kernels KQ32 slows in fine-tuning.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/ring-2026-11-27/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for kq in 0 1; do
  left=$(( 590 - ($(date +%s) - start) )); [ $kq = 0 ] && left=$(( left / 2 ))
  timeout $left python3 -c "
import runpy, sys
from palimpsa.kernels import chunked_bwd, chunked_fwd, fused_recurrent
chunked_bwd.CHUNKED_CONFIG['KQ32'] = bool($kq)
chunked_fwd.WALK_CONFIG['KQ32'] = bool($kq)
fused_recurrent.BWD_CONFIG['KQ32'] = bool($kq)
sys.argv = ['bench_train.py', '--upgraded', '64', '--seq-lens', '8192', '--tf32', '--profile', '25']
runpy.run_path('scripts/bench_train.py', run_name='__main__')" > $out/train64-kq$kq-profile.log 2>&1
  echo "train64 KQ32=$kq exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train64-kq$kq-profile.log
done
