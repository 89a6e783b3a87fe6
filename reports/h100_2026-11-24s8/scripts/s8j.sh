#!/usr/bin/env bash
# Session 8 run J (a timing probe, code not kept): the per-tile dC pass with its gradient product
# skipped (recompute only) or its logits product skipped (product only), llm.
set -u
for skip in none product logits; do
echo "== skip $skip"
LCE_DC_SKIP=$skip deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2 --configs ours 2>&1 | tee -a $OUT/bench_fused_llm_dc_probe.log | grep -E "^[a-z0-9-]+:|backward dC"
done
