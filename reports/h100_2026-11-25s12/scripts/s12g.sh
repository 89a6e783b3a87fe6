#!/usr/bin/env bash
# Session 12 run G: the driver's register allocation sampled. Seeded shuffles of the generated
# kernel (rnd<seed>) and of the hoisted-stash one (rndh<seed>) keep every result bitwise; each is
# compiled alone, read back from the shader cache, disassembled and scored (bank conflicts of the
# FFMAs, LDS-to-use distance: gpu_runs/sass_stats.py); then the lowest- and highest-scoring ones
# are checked bitwise and timed beside the generated kernel.
set -u
export ZSTD=$PWD/gpu_runs/bin/zstd LD_LIBRARY_PATH=$PWD/gpu_runs/bin:${LD_LIBRARY_PATH:-}
N=${N:-24}
: > $OUT/stats.txt
for v in base hs $(for s in $(seq 1 $N); do echo rnd$s rndh$s; done); do
  C=/tmp/glc_$v; rm -rf $C; mkdir -p $C
  __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=$C __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    COMPILE_ONLY=1 VARIANTS=$v PM=256 PN=1024 deno run -A gpu_runs/p12.ts > /dev/null 2>&1
  f=$(find $C -name "*.bin" | head -1)
  python3 gpu_runs/sass_extract.py $f /tmp/$v.raw > /dev/null 2>&1 &&
    nvdisasm -b SM90 /tmp/$v.raw > /tmp/$v.sass 2>/dev/null &&
    python3 gpu_runs/sass_stats.py $v /tmp/$v.sass >> $OUT/stats.txt
done
sort -k2,2n $OUT/stats.txt > $OUT/stats_sorted.txt
cat $OUT/stats_sorted.txt
pick=$( (head -6 $OUT/stats_sorted.txt; tail -2 $OUT/stats_sorted.txt) | awk '{print $1}' | grep -v '^base$\|^hs$' | paste -sd, )
echo "timed: $pick"
CHECK=$pick VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,hs,$pick,base deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/variants.log
mkdir -p $OUT/sass; for v in $(echo base,hs,$pick | tr , ' '); do cp /tmp/$v.sass $OUT/sass/; done
cd $OUT && tar czf sass.tgz sass && rm -rf sass
