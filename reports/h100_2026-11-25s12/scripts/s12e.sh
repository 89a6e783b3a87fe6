#!/usr/bin/env bash
# Session 12 run E: disassemble the compiled kernels (the driver's shader cache, zstd frames,
# nvdisasm -b SM90): the generated kernel and the variants that isolate the stash and the parity.
set -u
which zstd nvdisasm | tee $OUT/tools.txt
nvdisasm -b SM90 gpu_runs/sass/base_raw.bin > $OUT/base_local.sass 2> $OUT/base_local.err; echo "local carve rc $?"; head -c 300 $OUT/base_local.err
for v in base perm nostash_perm nostash noglobal_perm; do
  C=/tmp/glc_$v; rm -rf $C; mkdir -p $C
  __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    VARIANTS=$v PM=256 PN=1024 deno run -A gpu_runs/p12.ts 2>&1 | tail -1
  f=$(find $C -name "*.bin" | head -1)
  python3 gpu_runs/sass_extract.py $f /tmp/$v.raw 2>&1 | tee -a $OUT/extract.log
  nvdisasm -b SM90 /tmp/$v.raw > /tmp/$v.sass 2> /tmp/$v.err; echo "$v nvdisasm rc $? $(wc -l < /tmp/$v.sass) lines $(head -c 200 /tmp/$v.err)"
  cp /tmp/$v.sass $OUT/ 2>/dev/null
done
