#!/usr/bin/env bash
# Session 7 run G: thread-major tiles on the peer rows' gradient products (Liger's chunks back to
# back, the chunked method's chunk dE, the 16-bit dC and compiled's dEᵀ).
set -u
deno run -A scripts/bench_gemm.ts --cases ligerDE,ligerDC --inner 16 --tiles hw,s128_8x16,w128x128_tmj,w128x128_8x16_tmj --reps 5 --out $OUT/gemm_s7g_liger.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases chunkDE16,dC16,dE16t --tiles hw,s128_8x16,w128x128_tmj,w128x128_8x16_tmj --reps 3 --out $OUT/gemm_s7g_grads.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
