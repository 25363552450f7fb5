# Fourth call: fine-tuning as the trainer packs its data (documents packed into each row with cu_seqlens), 2.7b
# shapes, L = 8192 with 4 documents of 2048 tokens: 4 sequences fill the GPU unsplit, so the backward used to run the
# sequential Triton kernel there and now walks them whole in the Gluon pass. The plain model, the upgraded one with
# whole walks (the default) and with WHOLE=0, interleaved in one process (ab_train.py --documents, new), all 64
# layers upgraded, then 8.
# Run from the repository root with .bench_deps and .whl beside it: OUT=dir bash docs/bench/whole-2026-11-28/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
for n in 64 8; do
  left=$(( 585 - ($(date +%s) - start) ))
  [ $left -lt 60 ] && break
  timeout $left python3 docs/bench/gluon-auto-2026-11-28/ab_train.py --upgraded $n --documents 4 --arm whole= \
    --arm sequential=WHOLE=0 > $out/ab$n.log 2>&1
  echo "ab $n exit $? at $(( $(date +%s) - start )) s"; tail -5 $out/ab$n.log
done
