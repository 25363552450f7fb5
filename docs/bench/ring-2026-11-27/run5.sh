# Fifth call (2026-11-27): call 4's fine-tuning ran slower than the last stop's (all 64 layers upgraded 3,912
# tokens/s against 4,140, the plain model 8,050 against 8,172), so fine-tuning with all 64 layers upgraded twice in
# one call: KQ32 off everywhere (the three defaults set by hand), then on (the committed defaults).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/ring-2026-11-27/run5.sh
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
sys.argv = ['bench_train.py', '--upgraded', '64', '--seq-lens', '8192', '--tf32']
runpy.run_path('scripts/bench_train.py', run_name='__main__')" > $out/train64-kq$kq.log 2>&1
  echo "train64 KQ32=$kq exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train64-kq$kq.log
done
