#!/usr/bin/env bash
# Session 12 run C: does the driver's shader disk cache hold the compiled kernels (SASS)?
set -u
C=/tmp/glcache; rm -rf $C; mkdir -p $C
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
which nvdisasm cuobjdump | tee $OUT/tools.txt
VARIANTS=base PM=256 PN=1024 deno run -A gpu_runs/p12.ts 2>&1 | tail -2
ls -laR $C | head -40 | tee $OUT/cache_ls.txt
find / -xdev -path /proc -prune -o \( -name "GLCache" -o -name "*.nvcache" \) -print 2>/dev/null | head | tee -a $OUT/cache_ls.txt
ls -la ~/.cache ~/.cache/nvidia 2>&1 | tee -a $OUT/cache_ls.txt
python3 gpu_runs/sass_probe.py $C /tmp/carve 2>&1 | tee $OUT/probe.log | head -60
for d in ~/.cache/nvidia; do [ -d $d ] && python3 gpu_runs/sass_probe.py $d /tmp/carve2 2>&1 | tee $OUT/probe2.log | head -40; done
ls -S /tmp/carve/*.txt 2>/dev/null | head -3 | while read f; do cp $f $OUT/; done
