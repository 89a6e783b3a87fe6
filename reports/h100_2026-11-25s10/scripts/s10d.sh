#!/usr/bin/env bash
# Session 10 run D: shards aligned to 256 rows (gpu/tensor.ts) against the old layout in bench_gemm
# at the paper's shape; probes of the permuted accumulators without barriers / stash.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
B="deno run -A scripts/bench_gemm.ts --cases logits,logits16,dE,dC --tiles w128x256_k16 --reps 5"
$B --out $OUT/aligned.json 2>&1 | tee $OUT/aligned.log
cp gpu/tensor.ts /tmp/tensor_new.ts; cp gpu_runs/tensor_old.ts.txt gpu/tensor.ts
$B --out $OUT/old.json 2>&1 | tee $OUT/old.log
cp /tmp/tensor_new.ts gpu/tensor.ts
deno run -A scripts/bench_gemm.ts --cases logits --tiles w128x256_k16 --reps 5 --out $OUT/aligned2.json 2>&1 | tee $OUT/aligned2.log
VARIANTS=base,nosync,nosync_perm,nostash,nostash_perm,nobar,nobar_perm deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
