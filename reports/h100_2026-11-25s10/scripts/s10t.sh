#!/usr/bin/env bash
# Session 10 table run: PyTorch's rows, the main job (no flag but --external), then PyTorch's fp32
# matmul once more (its run-to-run spread); the SM clock logged every 100 ms.
set -u
name=${1:?usage: s10t.sh NAME}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
CLK=$!
python3 scripts/torch_reference.py --out $OUT/torch_reference.json --reps 5 --warmup 2 --beta 0.1 \
  --beta 0 --methods baseline,compiled,chunked,matmul --arith bf16,fp32 --fp32-methods baseline,chunked,matmul > $OUT/torch_reference.log 2>&1
tail -3 $OUT/torch_reference.log
./dev task table3 --external $OUT/torch_reference.json --out $OUT/t3 > $OUT/table3.log 2>&1
tail -3 $OUT/table3.log
python3 scripts/torch_reference.py --out $OUT/torch_matmul_after.json --reps 5 --warmup 2 --beta 0.1 \
  --methods matmul --arith fp32 --fp32-methods matmul > $OUT/torch_matmul_after.log 2>&1
tail -2 $OUT/torch_matmul_after.log
kill $CLK
cd $OUT && tar czf "$name.tgz" t3 table3.log torch_reference.json torch_reference.log torch_matmul_after.json torch_matmul_after.log clocks.csv && rm -rf t3
