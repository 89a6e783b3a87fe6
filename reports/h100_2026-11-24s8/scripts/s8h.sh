#!/usr/bin/env bash
# Session 8 run H: the backward tile's gradient products not widened (g1: d chunks of 64 for dE,
# 128 for dC, K-step 16) against the default (widened twice, K-step 8); llm and the paper's shape.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,g1 2>&1 | tee -a $OUT/bench_fused_llm_g1.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|backward dC"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,g1 2>&1 | tee -a $OUT/bench_fused_cce_g1.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|backward dC"
done
