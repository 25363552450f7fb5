# First call: the chunk walk's variants against the default in interleaved rounds (forward only): PAIR 1 and 2 (one
# reciprocal a pair of states), ALT (two tokens an iteration, each set of registers reloaded once its token is done),
# UNROLL 2 as it was, and a probe without the reciprocals (PAIR 9, wrong results, only to time what they cost); then
# ncu's pipe, issue and stall sections of the walk's kernel, default and PAIR 1.
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
ab=docs/bench/pair-walk-2026-11-28/walk_ab.py
all="--variant base= --variant pair1=walk_PAIR=1 --variant pair2=walk_PAIR=2 --variant alt=walk_UNROLL=2:walk_ALT=1
  --variant altpair1=walk_UNROLL=2:walk_ALT=1:walk_PAIR=1 --variant altpair2=walk_UNROLL=2:walk_ALT=1:walk_PAIR=2
  --variant u2=walk_UNROLL=2 --variant probe=walk_PAIR=9"
timeout 200 python3 $ab $all --rounds 5 > $out/ab-bf16-b1.log 2>&1
echo "ab bf16 b1 exit $? at $(( $(date +%s) - start )) s"; grep -E "ms|against" $out/ab-bf16-b1.log | tail -16
timeout 120 python3 $ab $all --rounds 3 --float32 > $out/ab-f32-b1.log 2>&1
echo "ab f32 b1 exit $? at $(( $(date +%s) - start )) s"; grep -E " ms " $out/ab-f32-b1.log | tail -8
timeout 100 python3 $ab --variant base= --variant pair1=walk_PAIR=1 --variant pair2=walk_PAIR=2 \
  --variant altpair1=walk_UNROLL=2:walk_ALT=1:walk_PAIR=1 --shapes 4x8192 --rounds 3 > $out/ab-bf16-b4.log 2>&1
echo "ab bf16 b4 exit $? at $(( $(date +%s) - start )) s"; grep -E " ms " $out/ab-bf16-b4.log | tail -4
cat > $out/one.py <<'PY'
import sys, torch
sys.path.insert(0, "scripts")
import bench_scan
from palimpsa.kernels import fused_recurrent
inputs = bench_scan.scan_inputs(1, 2048)
config = {"kernel": "chunked", **bench_scan.config_keys(sys.argv[1])}
with torch.no_grad():
    for _ in range(2):
        fused_recurrent.fused_recurrent_palimpsa_scan(inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"],
                                                      inputs["beta"], 1.0, None, False, False, fwd_config=config)
torch.cuda.synchronize()
PY
for v in "walk_PAIR=0" "walk_PAIR=1"; do
  left=$(( 560 - ($(date +%s) - start) )); [ $left -lt 40 ] && break
  timeout $left ncu --clock-control none -k regex:palimpsa_fwd_kernel -s 1 -c 1 --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
    --section Occupancy --metrics smsp__inst_executed_pipe_xu.sum,smsp__inst_executed.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active \
    python3 $out/one.py $v > $out/ncu-$v.txt 2>&1
  echo "ncu $v exit $? at $(( $(date +%s) - start )) s"
  grep -E "Issue Slots Busy|No Eligible|Executed Ipc A|pipe_xu|pipe_fma|issue_active|inst_executed|Stall|Duration|Warp Cycles Per Issued" $out/ncu-$v.txt | head -24
done
