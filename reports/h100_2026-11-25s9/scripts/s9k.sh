#!/usr/bin/env bash
# Session 9 run K: the plain product on the 128-thread 128×128 tiles double-buffered (the one
# combination the generator expresses that sessions 4–9 had not timed), beside the table's tile.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
deno run -A scripts/bench_gemm.ts --cases logits --tiles hw,s128_8x16,s128_8x16_dbuf,s128_16x8_dbuf --reps 5 2>&1 | tee $OUT/bench_gemm.log | tail -6
