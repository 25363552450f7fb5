# Sixth call (short: the session's last ~260 s of device time): the final kernel, whose pass A and segment branch
# on WALK_RESCALE and RESCALE as constexprs first (Triton 3.6 failed to compile some kernels branching on a constant
# False: the default's code changed, 245 registers instead of 250 under 3.6 on the CPU). The float64 checks at the
# defaults, then the default and the preset's keys side by side (bf16, B = 1, L = 8192).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/rescaled-walk-2026-11-28/run6.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 80 python3 scripts/check_scan_gpu.py --backend triton-chunked --without-uncertainty \
  --json $out/check.json > $out/check.log 2>&1
echo "check exit $? at $(( $(date +%s) - start )) s"; grep -E " NO|checks passed|rror" $out/check.log | tail -3
P12=SEG=2:LOCAL_MAXNREG=168:LOCAL_PROGRAMS_PER_SM=12:WALK_RESCALE=1:WIDEN=0
left=$(( 175 - ($(date +%s) - start) ))
timeout $left python3 scripts/bench_scan.py --no-step --shapes 1x8192 --breakdown --backends "chunked,chunked@$P12" \
  --json $out/bench.json > $out/bench.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|local |chunked.* 8192 \|" $out/bench.log | tail -5
