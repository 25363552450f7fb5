# sourced by callN/run.sh: the package importable from the working tree, mamba_ssm from .bench_deps, the carried
# Triton cache, and the machine's name and versions in $OUT/k/machine.txt
set -u
out=$OUT/k; mkdir -p $out
site=$(mktemp -d); mkdir -p $site/palimpsa && touch $site/palimpsa/__init__.py
ln -s $PWD/upgrade $site/palimpsa/upgrade && ln -s $PWD/kernels $site/palimpsa/kernels
export PYTHONPATH=$site:$PWD/.bench_deps/site TRITON_DEFAULT_FP_FUSION=1
tar xzf triton-cache.tgz 2>/dev/null; export TRITON_CACHE_DIR=$PWD/.triton-cache TRITON_CACHE_AUTOTUNING=1
start=$(date +%s)
{ nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $out/machine.txt 2>&1
cat $out/machine.txt
