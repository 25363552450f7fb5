# Seventh call (2026-11-27): calls 5 and 6 with the order reversed (KQ32 on first, then off), 64 layers and 8, since calls 5 and 6 both ran
# off first and the profile of call 6 found the scan kernels 1.7% faster with KQ32 where the timed steps were not.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/ring-2026-11-27/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for run in 64:1 64:0 8:1 8:0; do
  n=${run%:*}; kq=${run#*:}; left=$(( (590 - ($(date +%s) - start)) / 2 )); [ $run = 8:0 ] && left=$(( left * 2 ))
  timeout $left python3 -c "
import runpy, sys
from palimpsa.kernels import chunked_bwd, chunked_fwd, fused_recurrent
chunked_bwd.CHUNKED_CONFIG['KQ32'] = bool($kq)
chunked_fwd.WALK_CONFIG['KQ32'] = bool($kq)
fused_recurrent.BWD_CONFIG['KQ32'] = bool($kq)
sys.argv = ['bench_train.py', '--upgraded', '$n', '--seq-lens', '8192', '--tf32']
runpy.run_path('scripts/bench_train.py', run_name='__main__')" > $out/train$n-kq$kq.log 2>&1
  echo "train$n KQ32=$kq exit $? at $(( $(date +%s) - start )) s"; tail -1 $out/train$n-kq$kq.log
done
