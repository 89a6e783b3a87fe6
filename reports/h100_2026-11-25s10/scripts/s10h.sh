#!/usr/bin/env bash
# Session 10 run H: staging reads pipelined in the source; the next step's loads issued later.
set -u
for v in base pipe pipe_perm fetchk1 fetchk2 fetchk4 fetchk12 hw:pipe_perm s128:pipe_perm; do
  VARIANTS=$v timeout 60 deno run -A gpu_runs/p10a.ts 2>&1 | grep -v "^NVIDIA" | tee -a $OUT/probe.log
done
