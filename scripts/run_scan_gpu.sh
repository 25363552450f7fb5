#!/usr/bin/env bash
# One GPU call for the scan kernels (<= ~8 min on an H100/H200): record the machine; compile-inspect every Gluon
# variant (CPU, in the background); sweep the Gluon forward's and backward's variants (quick float64 checks, then
# times beside Triton: scripts/sweep_gluon_scan.py); run all of check_scan_gpu.py's float64 checks on the fastest
# forward that passed (with the fastest Gluon backward where it beat Triton's, else Triton's); time that path,
# Triton and mamba_ssm's SSD side by side (bench_scan.py, B = 1 and 4, L = 2k/8k/16k; B = 1 only when the call is
# late). Every step runs under its own time limit and a failing step (or variant) does not stop the next; raw
# outputs go to the directory given as the first argument, and SUMMARY.txt there (printed last) is the result.
#
#   bash scripts/run_scan_gpu.sh "$OUT"
set -u
out=${1:?usage: run_scan_gpu.sh OUTPUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
start=$(date +%s)
# The package goes on PYTHONPATH as a palimpsa/ folder linking upgrade/ and kernels/ (an editable install needs a
# build backend that a bare GPU image may lack); the benchmarks need nothing beyond torch and triton.
site=$(mktemp -d)
mkdir -p "$site/palimpsa" && touch "$site/palimpsa/__init__.py"
ln -s "$PWD/upgrade" "$site/palimpsa/upgrade" && ln -s "$PWD/kernels" "$site/palimpsa/kernels"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_DEFAULT_FP_FUSION=1
# mamba_ssm's Triton SSD for the side-by-side timing, when its pure-Python wheel was carried (docs/kernels.md)
[ -d .bench_deps/site ] && export PYTHONPATH="$PYTHONPATH:$PWD/.bench_deps/site"
{
    nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    python3 -c "import mamba_ssm" 2>/dev/null && echo "mamba_ssm importable" \
        || echo "mamba_ssm NOT importable as a package: bench_scan.py tries its Triton ops alone, else times" \
                "Triton with beta=None in SSD's place (bench.log says which)"
} 2>&1 | tee "$out/machine.txt"
# registers, spills and SASS of every variant under this Triton (CPU work, beside the GPU sweep)
(timeout 200 python3 scripts/inspect_gluon_scan.py --json "$out/inspect.json" 2>&1 \
    | grep -v "nanobind\|leaked\|^ - " >"$out/inspect.log") &
inspect_pid=$!
timeout 260 python3 scripts/sweep_gluon_scan.py "$out" --variant-timeout 60 --total-timeout 240 \
    >"$out/sweep.log" 2>&1
echo "sweep: exit $? after $(( $(date +%s) - start )) s"
wait "$inspect_pid"
# the sweep's table again, with the offline numbers now that inspect has finished
timeout 30 python3 scripts/sweep_gluon_scan.py "$out" --retable >/dev/null 2>&1
best1=$(sed -n 1p "$out/sweep-winner.txt" 2>/dev/null)
best4=$(sed -n 2p "$out/sweep-winner.txt" 2>/dev/null)
bestb=$(sed -n 3p "$out/sweep-winner.txt" 2>/dev/null)
backends=triton
label=""
if [ -n "$best1" ]; then
    label="forward $best1, backward ${bestb:-Triton}"
    gluon_bwd=0
    [ -n "$bestb" ] && gluon_bwd=1
    PALIMPSA_GLUON_FWD_VARIANT="$best1" PALIMPSA_GLUON_BWD_VARIANT="$bestb" PALIMPSA_GLUON_BACKWARD=$gluon_bwd \
        timeout 120 python3 scripts/check_scan_gpu.py --backend gluon --json "$out/check-$best1.json" \
        >"$out/check-$best1.log" 2>&1
    echo "full check ($label): exit $? after $(( $(date +%s) - start )) s"
    backends="gluon@$best1${bestb:+/$bestb},triton"
    [ -n "$best4" ] && [ "$best4" != "$best1" ] && backends="gluon@$best1${bestb:+/$bestb},gluon@$best4,triton"
fi
# what is left of ~8 minutes: B = 1 and 4 need ~150 s, B = 1 alone ~75 s (mamba_ssm's autotuning included)
left=$(( 470 - ($(date +%s) - start) ))
quick=""
[ "$left" -lt 150 ] && quick="--quick"
[ "$left" -lt 75 ] && left=75
timeout "$left" python3 scripts/bench_scan.py --backends "$backends" --no-step $quick --json "$out/bench.json" \
    >"$out/bench.log" 2>&1
echo "bench: exit $? after $(( $(date +%s) - start )) s"
{
    echo "== machine"; cat "$out/machine.txt"
    echo; echo "== sweep of the Gluon variants (sweep.txt; worker log: sweep-worker.log)"
    cat "$out/sweep.txt" 2>/dev/null || tail -20 "$out/sweep.log"
    if [ -n "$best1" ]; then
        echo; echo "== all float64 checks of the fastest path: $label (check-$best1.log)"
        grep -E "checks passed|^ERROR|  NO$" "$out/check-$best1.log" | head -20
    fi
    echo; echo "== side by side (bench.log: $backends and SSD; gluon@F/B = Gluon forward F and backward B)"
    grep -A 30 "^bf16, H=" "$out/bench.log" || tail -30 "$out/bench.log"
    echo; echo "took $(( $(date +%s) - start )) s"
} >"$out/SUMMARY.txt" 2>&1
cat "$out/SUMMARY.txt"
