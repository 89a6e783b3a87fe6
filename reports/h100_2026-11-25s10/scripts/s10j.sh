#!/usr/bin/env bash
# Session 10 run J: split-K counts of the products that split, on each method's tile, with the
# shards aligned to 256 rows (the compiled row's dEᵀ, the baseline's dE, the chunked row's chunk dE,
# Liger's chunk dE).
set -u
B="deno run -A scripts/bench_gemm.ts --reps 5"
$B --cases logits --tiles w128x256_k16 > /dev/null 2>&1   # warm the clocks
$B --cases dE16t --tiles hw --splitk 2,3,4,5,8,11 --out $OUT/de16t.json 2>&1 | tee $OUT/de16t.log
$B --cases dE --tiles w128x256_8x8 --splitk 10,11,12 --out $OUT/de.json 2>&1 | tee $OUT/de.log
$B --cases chunkDE16 --tiles s128_8x16 --splitk 5,9,11 --inner 8 --out $OUT/chunkde16.json 2>&1 | tee $OUT/chunkde16.log
$B --cases ligerDE --tiles s128_8x16 --splitk 14,29,44 --inner 8 --out $OUT/ligerde.json 2>&1 | tee $OUT/ligerde.log
