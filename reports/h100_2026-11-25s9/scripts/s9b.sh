#!/usr/bin/env bash
# Session 9 run B (probe, LCE_DC_RANGE not kept): is the dC pass bound by its heaviest vocab
# tiles' serial walks? The pass restricted to vocab tiles [lo, hi) of the sorted order; and the
# 128×64 tile on 512 threads (4×4 logits a thread).
set -u
B="deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2"
G='^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  '
deno run -A gpu_runs/dc_check512.ts 2>&1 | tee $OUT/dc_check512.log | tail -8
$B --configs ours,t512 2>&1 | tee -a $OUT/bench_llm_full.log | grep -E "$G"
for r in 0,1 0,8 0,132 132,100000; do
  echo "== LCE_DC_RANGE=$r"
  LCE_DC_RANGE=$r $B --configs ours,t512 2>&1 | tee -a $OUT/bench_llm_range_$r.log | grep -E "$G"
done
