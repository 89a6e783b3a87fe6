#!/usr/bin/env bash
# Session 10 run B: FMA order / scalar accumulators (FMA-only and whole), XOR-swizzled unpadded
# staging single and double buffered (gpu_runs/p10a.ts).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
CHECK=dbufxor,xorsw,scalar,hmajor VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,fmaonly,fmaonly_swap,fmaonly_hmajor,fmaonly_scalar,swap,hmajor,scalar,xorsw,dbufxor,base deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
