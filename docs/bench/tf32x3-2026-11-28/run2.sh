# Second call: the new default ("auto" takes the chunked forward with tf32x3 products for float32 inputs at full
# precision, chunked_fwd.FULL_PRECISION_DOT) checked as dispatched against float64 (with the uncertainty output, and
# without it so that the Gluon local pass runs), then the chunked forward in IEEE products on the same cases (their
# float32 errors beside tf32x3's); B = 8, L = 8192 timed (the largest batch auto gives it: 38.8 programs an SM);
# fine-tuning at full precision with all 64 layers and with 8 upgraded: the plain model, auto, and auto with the
# sequential forward (its choice before) interleaved in one process (ab_train.py's FORWARD key).
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/tf32x3-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
timeout 110 python3 scripts/check_scan_gpu.py --json $out/check-auto.json > $out/check-auto.log 2>&1
echo "check auto exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto.log | tail -5
timeout 80 python3 scripts/check_scan_gpu.py --quick --without-uncertainty --json $out/check-auto-nou.json \
  > $out/check-auto-nou.log 2>&1
echo "check auto (no u) exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-auto-nou.log | tail -5
timeout 80 python3 scripts/check_scan_gpu.py --quick --forward chunked --forward-config DOT=ieee \
  --json $out/check-ieee.json > $out/check-ieee.log 2>&1
echo "check ieee exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check-ieee.log | tail -5
for fwd in auto sequential; do
  PALIMPSA_TRITON_FORWARD=$fwd timeout 60 python3 scripts/bench_scan.py --no-step --float32 --full-precision \
    --shapes 8x8192 --backends triton --json $out/bench-b8-$fwd.json > $out/bench-b8-$fwd.log 2>&1
  echo "bench B8 forward $fwd exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=" $out/bench-b8-$fwd.log | tail -1
done
for n in 64 8; do
  left=$(( 580 - ($(date +%s) - start) ))
  [ $left -lt 60 ] && break
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --full-precision --rounds 3 \
    --steps 2 --arm auto= --arm sequential-forward=FORWARD=sequential > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab$n.log
done
