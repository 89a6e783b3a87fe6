#!/usr/bin/env bash
# Session 12 run F: the stash with loop-invariant addresses (gpu_runs/p12.ts hoistStash), checked
# bitwise and timed; the compiled code of each kernel disassembled (shader cache, zstd, nvdisasm).
set -u
export ZSTD=$PWD/gpu_runs/bin/zstd LD_LIBRARY_PATH=$PWD/gpu_runs/bin:${LD_LIBRARY_PATH:-}
$ZSTD --version
CHECK=hs,hsf,hsfp,phsf,phsfp VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,hs,hsf,hsfp,phs,phsf,phsfp,perm,base deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/variants.log
mkdir -p $OUT/sass
for v in base hsf hsfp phsfp nostash_perm perm; do
  C=/tmp/glc_$v; rm -rf $C; mkdir -p $C
  __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    VARIANTS=$v PM=256 PN=1024 deno run -A gpu_runs/p12.ts > /dev/null 2>&1
  f=$(find $C -name "*.bin" | head -1)
  python3 gpu_runs/sass_extract.py $f /tmp/$v.raw 2>&1 | tee -a $OUT/extract.log
  nvdisasm -b SM90 /tmp/$v.raw > $OUT/sass/$v.sass 2>> $OUT/extract.log
done
cd $OUT && tar czf sass.tgz sass && rm -rf sass
