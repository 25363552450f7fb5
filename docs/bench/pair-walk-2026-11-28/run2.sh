# Second call: ncu's issue and stall sections of the chunk walk's kernel (default keys; call 1's reports did not come
# back: their file names had an "="), and the forward's three launches timed apart (torch.profiler, B = 1, L = 8192,
# bf16 and float32 with TF32).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/pair-walk-2026-11-28/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
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
cat > $out/launches.py <<'PY'
import sys, torch
sys.path.insert(0, "scripts")
import bench_scan
from palimpsa.kernels import fused_recurrent
for dtype in (torch.bfloat16, torch.float32):
    bench_scan.OURS_DTYPE = dtype
    torch.set_float32_matmul_precision("high")
    inputs = bench_scan.scan_inputs(1, 8192)
    run = lambda: fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 1.0, None, False, False,
        fwd_config={"kernel": "chunked"})
    with torch.no_grad():
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                run()
            torch.cuda.synchronize()
    print(dtype)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
PY
timeout 120 python3 $out/launches.py > $out/launches.log 2>&1
echo "launches exit $? at $(( $(date +%s) - start )) s"; grep -E "palimpsa|float|Name" $out/launches.log | cut -c1-160
timeout 200 ncu --clock-control none -k regex:palimpsa_fwd_kernel -s 1 -c 1 --section ComputeWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
  --section Occupancy --section SpeedOfLight --section SourceCounters -o $out/walk-base python3 $out/one.py walk_PAIR=0 > $out/ncu-base.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/walk-base.ncu-rep --page details > $out/ncu-base-details.txt 2>&1
ncu -i $out/walk-base.ncu-rep --page raw --csv > $out/ncu-base-raw.csv 2>&1
grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Active Warps Per|Eligible Warps|Registers|Achieved Occupancy|Theoretical Occ|SM Frequency" $out/ncu-base-details.txt | head -20
python3 - $out/ncu-base-raw.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0]; vals = rows[-1]
stalls = [(h, v) for h, v in zip(head, vals) if h.startswith("smsp__average_warp_latency_issue_stalled") or h.startswith("smsp__average_warps_issue_stalled_") and h.endswith("per_issue_active.ratio")]
for h, v in sorted(stalls, key=lambda x: -float(x[1].replace(",", "") or 0))[:14]:
    print(f"{h:90s} {v}")
PY
