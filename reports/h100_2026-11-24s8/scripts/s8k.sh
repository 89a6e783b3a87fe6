#!/usr/bin/env bash
# Session 8 run K: the tile passes (dC; dE tile by tile) on [k][row] staging with their gradient
# products not widened, against the default; llm and the paper's shape.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,ts2d,pertile,ts2d-pertile 2>&1 | tee -a $OUT/bench_fused_llm_ts2d.log | grep -E "^[a-z0-9-]+:|backward dC|backward dE"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,ts2d 2>&1 | tee -a $OUT/bench_fused_cce_ts2d.log | grep -E "^[a-z0-9-]+:|backward dC"
done
