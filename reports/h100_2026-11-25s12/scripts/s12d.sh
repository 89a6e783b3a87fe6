#!/usr/bin/env bash
# Session 12 run D: the compiled code of five kernels, read from the driver's shader disk cache
# (one cache per kernel) and disassembled with nvdisasm's raw mode (gpu_runs/sass_raw.py).
set -u
for v in base perm nostash_perm nostash fmaonly_perm ws64b2; do
  C=/tmp/glc_$v; rm -rf $C; mkdir -p $C
  __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    VARIANTS=$v PM=256 PN=1024 deno run -A gpu_runs/p12.ts 2>&1 | tail -1
  f=$(find $C -name "*.bin" | head -1)
  python3 gpu_runs/sass_raw.py $f $OUT/$v.sass 2>&1 | tee -a $OUT/sass.log
done
cp $(find /tmp/glc_base -name "*.bin" | head -1) $OUT/base_cache.bin
ls -la $OUT
