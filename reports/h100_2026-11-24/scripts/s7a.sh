#!/usr/bin/env bash
# Session 7 run A: logits tile candidates (k-major loads, unpadded double buffering, partial
# unrolling) against the 128×256 tile, and PyTorch's fp32 matmul on the same card.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv | tee $OUT/gpu.txt
T=w128x256_k16,w128x256_km,w128x256_km_np,w128x256_km_np_dbuf,w128x256_u8,w128x256_u4,w128x256_km_u8,w128x256_km_np_dbuf_u8,w128x256_k32_u8,w128x256_km_wt
deno run -A scripts/bench_gemm.ts --cases logits --tiles $T --reps 5 --out $OUT/gemm_s7a_logits.json 2>&1 | tee $OUT/bench.log | grep -v "^$"
deno run -A scripts/bench_gemm.ts --cases logits --tiles w128x256_k16 --reps 5 --out $OUT/gemm_s7a_again.json 2>&1 | tee -a $OUT/bench.log | grep -v "^$"
