# Seventeenth call (short, the session's last 260 s of device time): 4-token blocks (--block-size 4) for the Gluon
# local pass. Compiled for sm_90a on the CPU (Triton 3.9), SEG 2 at BS 4 takes 142 registers (bf16; 145 in float32)
# and 12,400 bytes of shared memory with no cap, so 3 programs a scheduler (12 an SM), at 2.5 state updates a token
# like the default's SEG 4 at BS 8; capped at 128 registers (16 bytes of stack) 16 an SM. The slab doubles (127
# block starts a chunk), so this is a fine-tuning trade, not a lone scan's. The default row is SEG 4 at BS 4 (one walk a
# block: 2 updates a token, 8 an SM). Timing only (no --breakdown: it times the default block size), no gradient
# check yet.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/gluon-auto-2026-11-28/run17.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 170 python3 scripts/bench_scan.py --no-step --shapes 1x8192 --block-size 4 --backends \
  "chunked,chunked@LOCAL_PROGRAMS_PER_SM=12:SEG=2,chunked@LOCAL_PROGRAMS_PER_SM=16:SEG=2:LOCAL_MAXNREG=128" \
  --json $out/bench-bs4.json > $out/bench-bs4.log 2>&1
echo "bench exit $? at $(( $(date +%s) - start )) s"; grep -E "^  B=|chunked" $out/bench-bs4.log | tail -6
