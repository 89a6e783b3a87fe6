#!/usr/bin/env bash
# Session 12 run I: the loop's shape (gpu_runs/p12.ts loopShape: the stash at the end of the body,
# or two K-steps a body), with and without the hoisted stash: listings cut at the barriers, bitwise
# checks, timings.
set -u
export ZSTD=$PWD/gpu_runs/bin/zstd LD_LIBRARY_PATH=$PWD/gpu_runs/bin:${LD_LIBRARY_PATH:-}
V="base hs rot u2 hsrot hsu2"
mkdir -p $OUT/sass
for v in $V; do
  C=/tmp/glc_$v; rm -rf $C; mkdir -p $C
  __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    COMPILE_ONLY=1 VARIANTS=$v PM=256 PN=1024 deno run -A gpu_runs/p12.ts > /dev/null 2>&1
  f=$(find $C -name "*.bin" | head -1)
  python3 gpu_runs/sass_extract.py $f /tmp/$v.raw > /dev/null 2>&1 &&
    nvdisasm -b SM90 /tmp/$v.raw > $OUT/sass/$v.sass 2>/dev/null &&
    python3 gpu_runs/sass_loop_segments.py $OUT/sass/$v.sass 2>&1 | tee -a $OUT/segments.log
done
CHECK=rot,u2,hsrot,hsu2 VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,hs,rot,u2,hsrot,hsu2,base deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/variants.log
cd $OUT && tar czf sass.tgz sass && rm -rf sass
