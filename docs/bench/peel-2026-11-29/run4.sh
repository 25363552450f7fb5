# Fourth call: call 3 found the local pass slower with pass B's token factors from the stage and the slab copied into
# the slots (9.29-9.39 ms against call 1's 9.18-9.25). Both are timing macros now (FAC, SLABCP; FAC reads the
# factors a token ahead): the four forms side by side, interleaved, with peeled states (TSUB 6); the gradients'
# differences from the first form show they compute the same.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/peel-2026-11-29/run4.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/peel-2026-11-29/time_tsub.py --tsubs 6 --defines "FAC=0+SLABCP=0,,FAC=0,SLABCP=0" \
  > $out/time_forms.log 2>&1
echo "time_forms exit $? at $(( $(date +%s) - start )) s"; tail -20 $out/time_forms.log
