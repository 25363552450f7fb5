# Fifth call: what bounds the local pass, since 24% fewer instructions (HSUM, call 1) and the warp sums moved off the
# token's end (DEFER, call 4) changed nothing. Interleaved: the default; the decay gradient's <dM, M> + <dI, J> in 4
# chains of FFMAs instead of one 64 long (SSPLIT 1); the probes (wrong gradients) 2 (no dq/dk/decay-gradient
# butterflies or atomics), 16 (the butterflies, no atomics), 32 (the reverse step's reciprocals as multiplies).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/hsum-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 python3 docs/bench/hsum-2026-11-29/time_probes.py > $out/time_probes.log 2>&1
echo "time_probes exit $? at $(( $(date +%s) - start )) s"; cat $out/time_probes.log | tail -12
