#!/usr/bin/env bash
# Session 10 run I: Liger's chunk products (128-row chunks) by tile and split count, back to back.
set -u
deno run -A scripts/bench_gemm.ts --cases ligerDE --tiles s128_8x16,hw,w128x256_k16 --splitk auto,22,29,44 --inner 8 --reps 5 --out $OUT/liger_de.json 2>&1 | tee $OUT/liger_de.log
deno run -A scripts/bench_gemm.ts --cases ligerDC --tiles hw,s128_8x16,w128x256_k16 --inner 8 --reps 5 --out $OUT/liger_dc.json 2>&1 | tee $OUT/liger_dc.log
