# Seventh call (on call 6's machine, still warm): fine-tuning with all 64 layers upgraded once more, since call 6's
# 0.54x came from the same plain model's tokens/s as the last record's 0.58x and a slower upgraded one.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run7.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh >/dev/null
timeout 200 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 > $out/train64b.log 2>&1; echo "exit $?"
grep -E "^  8192|RUNS" $out/train64b.log
