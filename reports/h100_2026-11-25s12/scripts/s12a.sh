#!/usr/bin/env bash
# Session 12 run A: the wide tile double-buffered in exactly 48 KiB with the stash spread through
# the arithmetic (gpu_runs/p12.ts dbufMid), bitwise checks, then P against PyTorch's fp32 matmul
# alternated three times.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $OUT/gpu.txt
(nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/clocks.csv) & SMI=$!
CHECK=dbm_3_7_11,dbs_3_7_11,pdbs_3_7_11,dbs_15 VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,dbm_3_7_11,dbs_3_7_11,pdbm_3_7_11,pdbs_3_7_11,dbm_15,dbs_15,dbs_1_5_9,dbs_5_9_13,dbs_0_0_0,dbs_7_7_7,dbs_11_11_11,pdbs_1_5_9,pdbs_5_9_13,dbs_2_4_6,base deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/variants.log
for i in 1 2 3; do
  python3 scripts/torch_reference.py --out $OUT/torch_mm_$i.json --reps 5 --warmup 2 --beta 0.1 \
    --methods matmul --arith fp32 --fp32-methods matmul > $OUT/torch_mm_$i.log 2>&1
  grep -h "matmul" $OUT/torch_mm_$i.log | tail -2
  deno run -A scripts/bench_gemm.ts --reps 5 --cases logits --tiles w128x256_k16 2>&1 | tail -1
done 2>&1 | tee $OUT/alternate.log
kill $SMI
