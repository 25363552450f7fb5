# First call: host against GPU time of one block's forward and backward (host_phases.py), with all 64 layers
# upgraded (the whole step's CPU profile too) and with 8 (a plain Mamba2 block beside an upgraded one).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/host-2026-11-29/run1.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 docs/bench/host-2026-11-29/host_phases.py --layers 64 > $out/phases64.log 2>&1
echo "64 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/phases64.log | cut -c1-200 | head -60
timeout 200 python3 docs/bench/host-2026-11-29/host_phases.py --layers 8 --top 0 > $out/phases8.log 2>&1
echo "8 exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/phases8.log | cut -c1-200 | head -12
