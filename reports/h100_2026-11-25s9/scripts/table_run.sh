#!/usr/bin/env bash
# Table runs `bash table_run.sh NAME`: session 7's F, I and M (s7f, s7i, s7m; run at the time as
# s7f.sh, s7i.sh and s7m.sh, which differed only in this name) and session 8's G, M and N (s8g,
# s8m, s8n): PyTorch's rows, then the main job (no flag but --external), then the llm check, with the
# SM clock logged every 100 ms; everything tarred as NAME.tgz.
set -u
name=${1:?usage: table_run.sh NAME}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
CLK=$!
python3 scripts/torch_reference.py --out $OUT/torch_reference.json --reps 5 --warmup 2 --beta 0.1 \
  --beta 0 --methods baseline,compiled,chunked,matmul --arith bf16,fp32 --fp32-methods baseline,chunked,matmul > $OUT/torch_reference.log 2>&1
tail -3 $OUT/torch_reference.log
./dev task table3 --external $OUT/torch_reference.json --out $OUT/t3 > $OUT/table3.log 2>&1
tail -3 $OUT/table3.log
./dev task table3 --fixture llm --n 4096 --v 24576 --betas 0.1 --methods fused,fused-nosort,fused-tilemap \
  --modes fwd,bwd,fwd+bwd --reps 5 --warmup 1 --out $OUT/llm > $OUT/llm.log 2>&1
tail -2 $OUT/llm.log
kill $CLK
cd $OUT && tar czf "$name.tgz" t3 llm table3.log llm.log torch_reference.json torch_reference.log clocks.csv && rm -rf t3 llm
