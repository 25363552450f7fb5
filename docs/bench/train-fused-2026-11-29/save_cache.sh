# sourced at the end of a callN run: the Triton cache (compiled kernels and autotuning results) back in at most
# three 15 MB parts, so that the next call, carrying triton-cache.tgz, skips ~200 s of compiling on a fresh machine
cd $PWD && tar czf /tmp/tc.tgz .triton-cache 2>/dev/null
size=$(stat -c %s /tmp/tc.tgz); echo "triton cache $(( size / 1048576 )) MiB compressed"
if [ $size -lt 47185920 ]; then split -b 15M /tmp/tc.tgz $OUT/tc.part.; else echo "cache too large to bring back"; fi
