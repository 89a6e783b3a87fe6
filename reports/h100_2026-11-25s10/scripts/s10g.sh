#!/usr/bin/env bash
# Session 10 run G: both operands held K-major (the stash writes whole vec4s), with and without the
# permuted accumulators; one process per variant, 60 s each at most.
set -u
for v in base wide_tt:base wide_tt:perm hw_tt:base hw_tt:perm wide_tt:nostash_perm perm; do
  VARIANTS=$v timeout 60 deno run -A gpu_runs/p10a.ts 2>&1 | grep -v "^NVIDIA" | tee -a $OUT/probe.log
done
