# The device call of 2026-11-24 (one H100, torch 2.11, Triton 3.6) that measured the BLOCK4 backward variants:
# `OUT=/some/dir bash docs/bench/gluon-bwd-block4-h100-2026-11-24/run.sh` from the repository root, with .bench_deps
# (mamba_ssm) and triton-cache.tgz beside it when there. Its bench step ran under `timeout 100` and timed out
# (mamba_ssm autotunes first); it is 200 here.
set -u
out=$OUT/k; mkdir -p $out
site=$(mktemp -d); mkdir -p $site/palimpsa && touch $site/palimpsa/__init__.py
ln -s $PWD/upgrade $site/palimpsa/upgrade && ln -s $PWD/kernels $site/palimpsa/kernels
export PYTHONPATH=$site:$PWD/.bench_deps/site TRITON_DEFAULT_FP_FUSION=1
tar xzf triton-cache.tgz 2>/dev/null; export TRITON_CACHE_DIR=$PWD/.triton-cache
start=$(date +%s)
{ nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $out/machine.txt 2>&1
cat $out/machine.txt
timeout 170 python3 scripts/sweep_gluon_scan.py $out --variants triton,bwd:b2w1,bwd:b1w1,bwd:b2w1g,bwd:b1w1g,bwd:b2w1gr200,bwd:b2w1r200 --variant-timeout 60 --total-timeout 160 > $out/sweep.log 2>&1
echo "sweep exit $? at $(( $(date +%s) - start )) s"; cat $out/sweep.txt 2>/dev/null | head -30
PALIMPSA_GLUON_BWD_VARIANT=b2w1g timeout 110 python3 scripts/check_scan_gpu.py --backend gluon-bwd --json $out/check-b2w1g.json > $out/check-b2w1g.log 2>&1
echo "check b2w1g exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/check-b2w1g.log
timeout 200 python3 scripts/bench_scan.py --quick --no-step --backends gluon@c2l2u2s/b2w1g,gluon@c2l2u2s/b1w1g,triton --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; tail -25 $out/bench.log
for vv in b2w1 b2w1g; do
  timeout 45 ncu --clock-control none -k regex:palimpsa_gluon_bwd -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats python3 scripts/bench_scan.py --profile --backends gluon@c2l2u2s/$vv > $out/ncu-$vv.txt 2>&1
  echo "ncu $vv exit $? at $(( $(date +%s) - start )) s"
done
grep -h -E "Duration|Stall|Warp Cycles Per Issued|Issued Warp|Achieved Occupancy|Registers Per|Waves Per SM|No Eligible" $out/ncu-*.txt | head -40
