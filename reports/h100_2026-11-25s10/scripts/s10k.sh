#!/usr/bin/env bash
# Session 10 run K: the no-filter rows' chunk products by split count (the new rule changes
# dE += G·C[chunk] from 2 slices to 1 and dC[chunk] = Gᵀ·E from 3 to 2).
set -u
B="deno run -A scripts/bench_gemm.ts --reps 5 --inner 4"
$B --cases logits --tiles w128x256_k16 --inner 1 > /dev/null 2>&1   # warm the clocks
$B --cases denseDE --tiles hw --splitk 1,2,3,auto --out $OUT/dense_de.json 2>&1 | tee $OUT/dense_de.log
$B --cases denseDC --tiles hw_k32 --splitk 2,3,4,auto --out $OUT/dense_dc.json 2>&1 | tee $OUT/dense_dc.log
