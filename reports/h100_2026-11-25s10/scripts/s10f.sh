#!/usr/bin/env bash
# Session 10 run F: is the stash's count of workgroup writes what caps the permuted kernel? (timing only)
set -u
VARIANTS=base,stash128,stash128_perm,nostash_perm,perm,hw:stash128_perm,hw:nostash_perm deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
