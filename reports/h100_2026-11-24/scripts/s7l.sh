#!/usr/bin/env bash
# Session 7 run L: the target scatter with known run ends, 4 tokens loaded ahead and 4 column
# lanes a thread, on the llm fixture (fused backward breakdown), twice.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,nosort,f32grad 2>&1 | tee -a $OUT/bench_fused_llm_scatter.log | grep -E "^[a-z0-9]+:|scatter"
done
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours 2>&1 | tee -a $OUT/bench_fused_cce_scatter.log | grep -E "^[a-z0-9]+:|scatter"
