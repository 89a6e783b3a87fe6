#!/usr/bin/env bash
# Session 9 run H: the fused backward's breakdown (llm, cce), then the table with the dC order
# (table_run.sh s9h: PyTorch's rows, the main job, the llm check, SM clock logged).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,dcseq,nosort,pertile 2>&1 | tee -a $OUT/bench_fused_llm.log | grep -E "^[a-z0-9-]+:|backward dC|kept g|backward dE"
bash gpu_runs/table_run.sh s9h
