#!/usr/bin/env bash
# Session 7 run D: the fused backward's dE layouts on the llm fixture (4096×24576×2304).
set -u
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,nosort,s1r1,s1r4,s2r2,s2r4,s3r4,s4r2,s4r4,s8r1,s8r4 2>&1 | tee $OUT/bench_fused_llm.log
