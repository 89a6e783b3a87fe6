#!/usr/bin/env bash
# Session 7 run B: swizzled staging against the 128×256 and 128×128 tiles (logits), then the
# gradient products on the swizzled tiles.
set -u
deno run -A scripts/bench_gemm.ts --cases logits --tiles w128x256_k16,w128x256_sw,w128x256_sw_wt,hw,w128x128_sw --reps 5 --out $OUT/gemm_s7b_logits.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases dC,dE16t,logits16 --tiles w128x256_k16,w128x256_sw,hw,w128x128_sw --reps 3 --out $OUT/gemm_s7b_grads.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
