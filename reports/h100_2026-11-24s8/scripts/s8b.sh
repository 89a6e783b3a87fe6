#!/usr/bin/env bash
# Session 8 run B: product tiles of the gathered dE and staging layouts of its kept g pass, llm.
set -u
C=g64k16t8x4s,g64k32t8x4s,g32k16t8x4s,g64k16t8x4m,g64k16t8x4sw,g64k16t4x8s,g128k16t8x8s,g64k16t8x4s-kgs,g64k16t8x4s-kgw,g64k16t8x4s-kgm,g64k16t8x4s-kgsw
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs $C 2>&1 | tee -a $OUT/bench_fused_llm_tiles.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
done
