#!/usr/bin/env bash
# One GPU call for the scan kernels (~4-5 min on an H100/H200, at most ~8): install the package, record the
# machine, compile-inspect the Gluon kernels, check the Gluon paths against float64 (forward only, then forward and
# backward), then time gluon, gluon-bwd and triton side by side. Every step runs under its own time limit and a
# failing step does not stop the next; raw outputs go to the directory given as the first argument.
#
#   bash scripts/run_scan_gpu.sh "$OUT"
set -u
out=${1:?usage: run_scan_gpu.sh OUTPUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
# The package goes on PYTHONPATH as a palimpsa/ folder linking upgrade/ and kernels/ (an editable install needs a
# build backend that a bare GPU image may lack); the benchmarks need nothing beyond torch and triton.
site=$(mktemp -d)
mkdir -p "$site/palimpsa" && touch "$site/palimpsa/__init__.py"
ln -s "$PWD/upgrade" "$site/palimpsa/upgrade" && ln -s "$PWD/kernels" "$site/palimpsa/kernels"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# mamba_ssm's Triton SSD for the side-by-side timing, when its pure-Python wheel was carried (docs/kernels.md)
[ -d .bench_deps/site ] && export PYTHONPATH="$PYTHONPATH:$PWD/.bench_deps/site"
{
    nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$out/machine.txt"
timeout 60 python3 scripts/inspect_gluon_scan.py --json "$out/inspect.json" 2>&1 | grep -v "nanobind\|^ - " \
    | tee "$out/inspect.log"
for backend in gluon gluon-bwd; do
    timeout 120 python3 scripts/check_scan_gpu.py --backend "$backend" --json "$out/check-$backend.json" \
        >"$out/check-$backend.log" 2>&1
    echo "check $backend: exit $?"
    grep -E "checks passed|^ERROR|  NO$" "$out/check-$backend.log" | head -20
done
timeout 180 python3 scripts/bench_scan.py --backends gluon,gluon-bwd,triton --no-step --json "$out/bench.json" \
    >"$out/bench.log" 2>&1
echo "bench: exit $?"
grep -A 30 "^bf16, H=" "$out/bench.log" || tail -30 "$out/bench.log"
