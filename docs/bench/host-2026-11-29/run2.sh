# Second call: the kernels of an upgraded and a plain block's forward and backward (block_kernels.py), 8 layers
# upgraded. Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/host-2026-11-29/run2.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 300 python3 docs/bench/host-2026-11-29/block_kernels.py --layers 8 > $out/kernels8.log 2>&1
echo "exit $? at $(( $(date +%s) - start )) s"; grep -v arn $out/kernels8.log | cut -c1-150 | head -180
