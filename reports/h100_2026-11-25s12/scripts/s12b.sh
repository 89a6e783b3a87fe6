#!/usr/bin/env bash
# Session 12 run B: warp specialisation of the plain product's wide tile (gpu_runs/p12.ts
# warpSpec): 256 computing threads, 32 or 64 more that only load and stash the next K-step into
# the other of two staging copies; one barrier a K-step. Bitwise checks, then timings.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $OUT/gpu.txt
CHECK=ws64b3,pws64b3,ws32b3,pws32b6 VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,ws64b1,ws64b2,ws64b3,pws64b1,pws64b3,ws32b2,ws32b3,ws32b6,pws32b3,pws32b6,perm,base deno run -A gpu_runs/p12.ts 2>&1 | tee $OUT/variants.log
