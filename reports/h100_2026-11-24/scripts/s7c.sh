#!/usr/bin/env bash
# Session 7 run C: thread-major staging (one dynamic index per operand) against the current tiles.
set -u
deno run -A scripts/bench_gemm.ts --cases logits --tiles w128x256_k16,w128x256_tmj,w128x256_tmj_wt,w128x128_tmj,w128x128_8x16_tmj,w128x256_8x8_tmj,hw --reps 5 --out $OUT/gemm_s7c_logits.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases dC,dE16t,logits16 --tiles w128x256_k16,w128x256_tmj,hw,w128x128_tmj --reps 3 --out $OUT/gemm_s7c_grads.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
