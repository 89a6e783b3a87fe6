#!/usr/bin/env bash
# Session 10 run C: accumulator components permuted against b's (register parity), gpu_runs/p10a.ts.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
CHECK=perm,perm_dbufxor,perm_xorsw VARIANTS=none PM=1000 PN=3000 deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/check.log
VARIANTS=base,perm,permzw,fmaonly_perm,perm_xorsw,perm_dbufxor,base,perm deno run -A gpu_runs/p10a.ts 2>&1 | tee $OUT/probe.log
