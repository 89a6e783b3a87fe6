#!/usr/bin/env bash
# Session 9 run I: the same table on an H200 (issue 17's targets are stated for one): the fused
# backward's breakdown on llm, then table_run.sh s9i (PyTorch's rows, the main job, the llm check).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu.txt
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,dcseq,nosort 2>&1 | tee -a $OUT/bench_fused_llm.log | grep -E "^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  "
bash gpu_runs/table_run.sh s9i
