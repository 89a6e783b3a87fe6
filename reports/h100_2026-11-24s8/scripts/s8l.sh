#!/usr/bin/env bash
# Session 8 run L: the gathered dE's rounds planned on the GPU (token tiles packed by their kept
# counts, indirect dispatches); llm and the paper's shape.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,nosort,f32grad,pertile 2>&1 | tee -a $OUT/bench_fused_llm_plan.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|dE plan"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,nosort,pertile 2>&1 | tee -a $OUT/bench_fused_cce_plan.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|dE plan"
done
