# Eleventh call: bench_train.py's new GPU readings (SM clock, power, temperature from nvidia-smi after each model's
# timed steps, printed with each round), on a small model (2 rounds, 24 layers x 768, 4 upgraded, 2,048 tokens).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/w16-2026-11-29/run11.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
nvidia-smi --query-gpu=uuid,clocks.sm,power.draw,temperature.gpu --format=csv,noheader > $out/smi.txt 2>&1; cat $out/smi.txt
timeout 110 python3 scripts/bench_train.py --d-model 768 --n-layer 24 --upgraded 4 --seq-lens 2048 --tf32 --rounds 2 \
  --steps 5 --warmup 2 --json $out/train_small.json > $out/train_small.log 2>&1
echo "train_small exit $? at $(( $(date +%s) - start )) s"; grep -E "round|^  2048" $out/train_small.log
python3 -c "import json; r=json.load(open('$out/train_small.json')); print(r['rows'][0]['upgraded']['round_gpu_states'] if 'rows' in r else r)" 2>&1 | tail -2
