# Eighth call (on the same machine, still warm; the session's last 150 s of device time): fine-tuning with 8 layers
# upgraded.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run8.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh >/dev/null
timeout 120 python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 > $out/train8.log 2>&1; echo "exit $?"
grep -E "^  8192|RUNS" $out/train8.log
