#!/usr/bin/env bash
# Session 12 run T: the wide tile's [k slot][k in slot][row] staging (TILE_HW_WIDE.kSplit = 8)
# against the [k][row] one in bench_gemm (both orders), then the main job with same-card PyTorch
# rows before it and PyTorch's fp32 matmul again after it; the SM clock every 100 ms.
set -u
name=${1:?usage: s12t.sh NAME}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
CLK=$!
B="deno run -A scripts/bench_gemm.ts --reps 5 --cases logits"
$B --tiles w128x256_k16 > /dev/null 2>&1   # warm the clocks
$B --tiles w128x256_k16_nosplit,w128x256_k16 --out $OUT/gemm_1.json 2>&1 | tee $OUT/gemm.log
$B --tiles w128x256_k16,w128x256_k16_nosplit --out $OUT/gemm_2.json 2>&1 | tee -a $OUT/gemm.log
python3 scripts/torch_reference.py --out $OUT/torch_reference.json --reps 5 --warmup 2 --beta 0.1 \
  --beta 0 --methods baseline,compiled,chunked,matmul --arith bf16,fp32 --fp32-methods baseline,chunked,matmul > $OUT/torch_reference.log 2>&1
tail -3 $OUT/torch_reference.log
./dev task table3 --external $OUT/torch_reference.json --out $OUT/t3 > $OUT/table3.log 2>&1
tail -3 $OUT/table3.log
python3 scripts/torch_reference.py --out $OUT/torch_matmul_after.json --reps 5 --warmup 2 --beta 0.1 \
  --methods matmul --arith fp32 --fp32-methods matmul > $OUT/torch_matmul_after.log 2>&1
tail -2 $OUT/torch_matmul_after.log
kill $CLK
cd $OUT && tar czf "$name.tgz" t3 table3.log torch_reference.json torch_reference.log torch_matmul_after.json torch_matmul_after.log clocks.csv gemm_1.json gemm_2.json gemm.log && rm -rf t3
