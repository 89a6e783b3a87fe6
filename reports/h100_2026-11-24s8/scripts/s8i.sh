#!/usr/bin/env bash
# Session 8 run I: the dC pass with 2 or 4 vocab slices a backward tile; llm and the paper's shape.
set -u
for r in 1 2; do
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,dcs2,dcs4,nosort 2>&1 | tee -a $OUT/bench_fused_llm_dcs.log | grep -E "^[a-z0-9-]+:|backward dC"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,dcs2,dcs4 2>&1 | tee -a $OUT/bench_fused_cce_dcs.log | grep -E "^[a-z0-9-]+:|backward dC"
done
