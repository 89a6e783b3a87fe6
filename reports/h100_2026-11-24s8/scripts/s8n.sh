#!/usr/bin/env bash
# Session 8 run N (after the review): pass dE reads each token tile's kept count from the plan
# instead of counting the mask again; the fused backward's breakdown on llm and the paper's shape,
# then the table (table_run.sh s8n).
set -u
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,nosort,pertile 2>&1 | tee -a $OUT/bench_fused_llm_review.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|dE plan"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,nosort 2>&1 | tee -a $OUT/bench_fused_cce_review.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|dE plan"
bash gpu_runs/table_run.sh s8n
