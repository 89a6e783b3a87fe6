#!/usr/bin/env bash
# Session 8 run A: the gathered dE (issue 17 item 1) against the per-tile pass, on the llm fixture
# and at the paper's shape (fused backward breakdown), with two other product tiles.
set -u
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,pertile,gather-64,gather-8x16,nosort,f32grad 2>&1 | tee -a $OUT/bench_fused_llm_gather.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|backward dC|filter"
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,pertile 2>&1 | tee -a $OUT/bench_fused_llm_gather.log | grep -E "^[a-z0-9-]+:|kept g|backward dE"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,pertile,nosort 2>&1 | tee -a $OUT/bench_fused_cce_gather.log | grep -E "^[a-z0-9-]+:|kept g|backward dE|backward dC"
