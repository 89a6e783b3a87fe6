#!/usr/bin/env bash
# Session 8 run D: the kept g pass walking 1, 4 (default), 8 or 16 vocab tiles a workgroup; llm and
# the paper's shape, against the per-tile pass and No Sorting.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,kc1,kc8,kc16,pertile,nosort 2>&1 | tee -a $OUT/bench_fused_llm_chunk.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,kc1,kc8,kc16,pertile,nosort 2>&1 | tee -a $OUT/bench_fused_cce_chunk.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
done
