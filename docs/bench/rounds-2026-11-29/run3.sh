# Third call: fine-tuning at 2.7b shapes (bench_train.py --tf32, L = 8192) with all 64 layers upgraded (3 rounds) and
# with 8 (2 rounds), the first measurement since bench_train.py times its steps with the objects made before training
# frozen out of the garbage collector's generations (as the trainer's loop now does; docs/bench/pipea-2026-11-29,
# calls 5-7), with no kernel changed since the pipea record's calls 2 and 4 (0.908x and 0.579x).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rounds-2026-11-29/run3.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 330 python3 scripts/bench_train.py --upgraded 64 --seq-lens 8192 --tf32 --rounds 3 \
  --json $out/train64.json > $out/train64.log 2>&1
echo "train64 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train64.log | cut -c1-250
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_train.py --upgraded 8 --seq-lens 8192 --tf32 --rounds 2 \
  --json $out/train8.json > $out/train8.log 2>&1
echo "train8 exit $? at $(( $(date +%s) - start )) s"; grep -E "^  8192|round|RUNS|rounds" $out/train8.log | cut -c1-250
