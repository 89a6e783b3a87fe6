#!/usr/bin/env bash
# Session 7 run E: thread-major 128×128 staging for 16-bit logits (compiled, chunked) and Liger's
# f32 chunk logits, twice each, against the tiles in use.
set -u
for r in 1 2; do
deno run -A scripts/bench_gemm.ts --cases logits16 --tiles hw,w128x128_tmj --reps 5 --out $OUT/gemm_s7e_logits16_$r.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --n 1024 --inner 8 --cases logits16 --tiles hw,w128x128_tmj --reps 5 --out $OUT/gemm_s7e_chunk_$r.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --n 128 --inner 64 --cases logits --tiles hw,w128x256_k16,w128x128_tmj,w128x256_tmj --reps 5 --out $OUT/gemm_s7e_liger_$r.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
done
