# Fifth call (on call 4's machine, still warm; the session's last 70 s of device time): call 4's timing, which its 80 s
# limit cut off, by time_wg.py (CUDA events around the local pass, CUDA_WG 1, 4, 2 interleaved, 5 rounds each).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/cuda-correct-2026-11-29/run5.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh >/dev/null
timeout 55 python3 docs/bench/cuda-correct-2026-11-29/time_wg.py 2>&1 | tail -5 | tee $out/time_wg.log
