#!/usr/bin/env bash
# Session 7 run K: thread-major tiles on the dE products (the baseline's f32 G split 12 ways, the
# chunked method's chunk dE, Liger's chunk dE back to back).
set -u
deno run -A scripts/bench_gemm.ts --cases dE --splitk 12 --tiles w128x256_8x8,w128x256_8x8_tmj,w128x128_8x16_tmj,w128x128_16x8_tmj --reps 3 --out $OUT/gemm_s7k_de.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases chunkDE16 --tiles s128_8x16,w128x128_16x8_tmj,w128x256_8x8_tmj --reps 3 --out $OUT/gemm_s7k_chunkde.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases ligerDE --inner 16 --tiles s128_8x16,w128x128_16x8_tmj --reps 5 --out $OUT/gemm_s7k_ligerde.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
