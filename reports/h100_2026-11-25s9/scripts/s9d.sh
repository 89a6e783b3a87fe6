#!/usr/bin/env bash
# Session 9 run D (probe, LCE_MASK_DUMP not kept): kept tiles per vocab tile in the dC pass's
# walk order on llm (and per token tile), to see how long the dC pass's serial walks are.
set -u
LCE_MASK_DUMP=1 deno run -A scripts/bench_fused_backward.ts --fixture llm --n 4096 --v 24576 --d 2304 --reps 1 --warmup 0 --configs ours,nosort 2>&1 | tee $OUT/mask_llm.log | grep -E "^[a-z]+:|MASK" | cut -c1-2000
