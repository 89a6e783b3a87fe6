#!/usr/bin/env bash
# Session 7 run J: the fused forward on the thread-major 128×128 tile (candidate 13) against
# FUSED_TILE_HW (candidate 1), at the paper's shape, S = 4, twice each.
set -u
i=0
for t in 1 13 1 13; do
i=$((i+1))
deno task tune-forward --tile $t --splits 4 --no-plain --reps 3 --out $OUT/tf_${t}_$i 2>&1 | grep -v "^$" | tail -3
done
