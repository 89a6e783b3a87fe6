#!/usr/bin/env bash
# Session 9 run G: with the dC order the dC pass is bound by throughput, not its longest walk:
# fewer registers a thread (g1: products not widened) or 512 threads a workgroup (t512).
set -u
B="deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 5 --warmup 2"
G='^[a-z0-9-]+:|backward dC|kept g|backward dE|filter  |dC order'
$B --configs ours,g1,t512 2>&1 | tee -a $OUT/bench_llm.log | grep -E "$G"
