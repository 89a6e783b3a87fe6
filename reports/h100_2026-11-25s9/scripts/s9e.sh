#!/usr/bin/env bash
# Session 9 run E: the dC pass takes its vocab tiles most kept first (kernels/fused/dc_order.ts).
# Checked against float64 on the 128×64 tile first; then the fused backward on llm and cce.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
deno run -A gpu_runs/dc_check.ts 2>&1 | tee $OUT/dc_check.log | tail -7
B="deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2"
G='^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  |dC order'
$B --configs ours,dcseq,nosort,f32grad 2>&1 | tee -a $OUT/bench_llm.log | grep -E "$G"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,dcseq,nosort 2>&1 | tee -a $OUT/bench_cce.log | grep -E "$G"
