#!/usr/bin/env bash
# Session 9 run A: the dC pass's variants (tokens as rows, g read in place) checked against float64
# on the H100 (the 128×64 tile needs more than a software adapter's 32 KiB), then timed on llm and
# the paper's shape.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu.txt
deno run -A gpu_runs/dc_check.ts 2>&1 | tee $OUT/dc_check.log | tail -20
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,dct,dcr,dctr,dcr1,dctr1,g1 2>&1 | tee -a $OUT/bench_fused_llm.log | grep -E "^[a-z0-9-]+:|backward dC|filter  |kept g|backward dE"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,dct,dcr,dctr 2>&1 | tee -a $OUT/bench_fused_cce.log | grep -E "^[a-z0-9-]+:|backward dC"
