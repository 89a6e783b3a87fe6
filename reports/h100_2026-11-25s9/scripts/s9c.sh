#!/usr/bin/env bash
# Session 9 run C: loads two K-steps ahead (GemmTile.prefetch 2): the dC pass's serial walks are
# bound by load latency (run B: the heaviest vocab tile alone takes 11.1 of the pass's 19.8 ms).
# Checked against float64 first; then the fused backward on llm and cce, the plain product P.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
deno run -A gpu_runs/dc_check_pf2.ts 2>&1 | tee $OUT/dc_check_pf2.log | tail -7
B="deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2"
G='^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  '
$B --configs ours,pf2 2>&1 | tee -a $OUT/bench_llm.log | grep -E "$G"
deno run -A scripts/bench_fused_backward.ts --reps 3 --warmup 1 --configs ours,pf2 2>&1 | tee -a $OUT/bench_cce.log | grep -E "$G"
deno run -A scripts/bench_gemm.ts --cases logits,dC16,ligerDC --tiles hw,hw_pf2,hw_k8_pf2 --reps 5 2>&1 | tee $OUT/bench_gemm.log | tail -14
