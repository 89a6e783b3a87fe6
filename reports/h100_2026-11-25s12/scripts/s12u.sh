#!/usr/bin/env bash
# Session 12 run U: P (the new TILE_HW_WIDE, and the [k][row] staging beside it) against
# PyTorch's fp32 matmul, alternated three times on one card; the SM clock every 100 ms.
set -u
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
CLK=$!
for i in 1 2 3; do
  python3 scripts/torch_reference.py --out $OUT/torch_mm_$i.json --reps 5 --warmup 2 --beta 0.1 \
    --methods matmul --arith fp32 --fp32-methods matmul > $OUT/torch_mm_$i.log 2>&1
  grep -h "matmul" $OUT/torch_mm_$i.log | tail -1
  deno run -A scripts/bench_gemm.ts --reps 5 --cases logits --tiles w128x256_k16,w128x256_k16_nosplit 2>&1 | tail -2
done 2>&1 | tee $OUT/alternate.log
kill $CLK
