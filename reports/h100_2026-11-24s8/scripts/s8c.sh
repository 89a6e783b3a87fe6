#!/usr/bin/env bash
# Session 8 run C: the gathered dE with row lists (one dependent load per gathered C row) and the
# kept g pass on [k][row] staging: product tiles, against the per-tile pass; llm and paper shape.
set -u
C=ours,g64k16t8x4s,g32k16t4x4s,g16k16t8x4s,g128k16t8x8s,g32k32t8x4s,pertile
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs $C 2>&1 | tee -a $OUT/bench_fused_llm_rows.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
done
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs nosort,f32grad 2>&1 | tee -a $OUT/bench_fused_llm_rows.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,pertile,nosort 2>&1 | tee -a $OUT/bench_fused_cce_rows.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|backward dC"
