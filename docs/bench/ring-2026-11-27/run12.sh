# Twelfth call (2026-11-27): which instructions of the corrections wait, and on what: ncu's per-instruction stall
# samples of palimpsa_bwd_correct_kernel (bench_scan.py --profile: B = 1, L = 2048), digested by
# scripts/ncu_source_digest.py, for the next attempt at shortening their sub-block's chain (calls 8-10).
# Run from the repository root with .bench_deps beside it: OUT=dir bash docs/bench/ring-2026-11-27/run12.sh
source docs/bench/chunked-bwd-h100-2026-11-24/setup.sh
timeout 200 ncu --clock-control none -k regex:palimpsa_bwd_correct -c 1 --section WarpStateStats \
  --section SourceCounters -o $out/corr python3 scripts/bench_scan.py --profile --backends chunked \
  > $out/ncu-correct-source.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - start )) s"
ncu -i $out/corr.ncu-rep --page source --csv --print-source sass > /tmp/corr.csv 2>/dev/null
python3 scripts/ncu_source_digest.py /tmp/corr.csv 40 >> $out/ncu-correct-source.txt 2>&1
rm -f $out/corr.ncu-rep
sed -n '/instructions, /,+3p' $out/ncu-correct-source.txt
