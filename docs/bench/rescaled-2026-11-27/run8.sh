# Eighth call (2026-11-27): call 6's profile has the plain walks waiting on their loads; does asking L1 to keep the
# walks' inputs (ld.global.L1::evict_last on the keys, values, gains and decays the recompute loads) shorten that?
# The local pass timed in two processes one after the other (the option is a module constant read from
# PALIMPSA_WALK_EVICT when the kernels are imported, each with a Triton cache of its own): default, evict_last.
# Run from the repository root with .bench_deps beside it, with walk-evict.patch applied (git apply
# docs/bench/rescaled-2026-11-27/walk-evict.patch): OUT=dir bash docs/bench/rescaled-2026-11-27/run8.sh
# (the call's first attempt, with a third run and 110 s each, ran out of time compiling into fresh Triton caches)
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
i=0
for e in "" evict_last; do
  i=$((i + 1)); export TRITON_CACHE_DIR=/tmp/tc-$i
  PALIMPSA_WALK_EVICT=$e timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown \
    --backends "chunked" > $out/bench-$i${e:+-$e}.log 2>&1
  echo "run $i evict=${e:-default} exit $? at $(( $(date +%s) - start )) s"
  grep -h -E "^ +B=|local " $out/bench-$i${e:+-$e}.log | tail -2
done
