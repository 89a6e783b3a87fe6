#!/usr/bin/env bash
# Session 9 run J: with the order the dC pass's workgroups stop at the first vocab tile no token
# tile keeps (instead of walking its mask column): float64 check on the 128×64 tile, the fused
# backward's breakdown (llm, cce), then the table (table_run.sh s9j).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
deno run -A gpu_runs/dc_check.ts 2>&1 | tee $OUT/dc_check.log | tail -7
G='^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  |dC order'
deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours,dcseq,nosort 2>&1 | tee -a $OUT/bench_fused_llm.log | grep -E "$G"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,dcseq,nosort 2>&1 | tee -a $OUT/bench_fused_cce.log | grep -E "$G"
bash gpu_runs/table_run.sh s9j
