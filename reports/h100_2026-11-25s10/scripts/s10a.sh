#!/usr/bin/env bash
# Session 10 run A: the plain product's time taken apart (gpu_runs/p10a.ts), and three new
# staging variants (constant-k stash, no padding, two copies with a dynamic outer index).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee $OUT/gpu.txt
CHECK=constk,constk_nopad,dbufdyn VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/check.log
(nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/clocks.csv) & SMI=$!
VARIANTS=base,noglobal,nostash,nobar,nosync,fmaonly,noepi,constk,constk_nopad,dbufdyn,base deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
kill $SMI
