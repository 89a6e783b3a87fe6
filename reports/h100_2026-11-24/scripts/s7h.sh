#!/usr/bin/env bash
# Session 7 run H: the 8×16 thread-major tile on the dC products (f32 G of the baseline and the
# no-filter row, bf16 G of compiled, the chunked method's 1,024-row chunks).
set -u
T=hw,hw_k32,w128x128_8x16_tmj,w128x128_8x16_tmj_k32,w128x128_16x8_tmj
deno run -A scripts/bench_gemm.ts --cases dC,dC16 --tiles $T --reps 3 --out $OUT/gemm_s7h_dc.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --n 1024 --inner 8 --cases dC16 --tiles $T --reps 5 --out $OUT/gemm_s7h_chunk_dc.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases dC16 --tiles hw,w128x128_8x16_tmj --reps 3 --out $OUT/gemm_s7h_dc16_again.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
