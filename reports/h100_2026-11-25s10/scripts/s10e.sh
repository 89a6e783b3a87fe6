#!/usr/bin/env bash
# Session 10 run E: the permuted accumulators with the loads moved, and on the other tiles.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
CHECK=fetchmid_perm,hw:perm,s128:perm,w256:perm,wide512:perm VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,perm,noglobal_perm,fetchmid_perm,fetchend_perm,fetchmid,hw:base,hw:perm,s128:base,s128:perm,w256:base,w256:perm,widek8:base,widek8:perm,wide512:base,wide512:perm,hw:nostash_perm,s128:nostash_perm,base deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
