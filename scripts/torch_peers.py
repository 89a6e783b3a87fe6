#!/usr/bin/env python3
"""Same-card rows for the Table 3 report: PyTorch, and the seeds' own systems.

Measures on the GPU host's own PyTorch, for one shape and dtype, every β and the Cut Cross-Entropy
benchmark's data recipe (E = randn/D^¼, C = randn/D^¼, C[:N] = E, targets uniform):

- the PyTorch rows the paper compares against (--methods): the materialised baseline
  (cross_entropy on logits.float()), torch.compile of it, torchtune-style chunked CE (8 chunks)
  and the product E·Cᵀ alone (fwd), each in the arithmetics of --arith: `bf16` (inputs in
  --dtype on tensor cores, the paper's setting) and `fp32` (the same values upcast, TF32 off:
  the arithmetic of this project's WGSL kernels), named torch-<method>[-fp32];
- the seeds' own systems (--systems), each from the folder given (--paper-cce, --apple-cce,
  --liger) or the installed package: the paper's kernel (paper-ours, paper-nofilter,
  paper-fused; its authors' fork of Cut Cross-Entropy), Cut Cross-Entropy (cce, cce-nofilter;
  β = 0 only: it has no label smoothing), Liger-Kernel's fused linear cross-entropy (liger) and
  torch.nn.functional.linear_cross_entropy where torch has it (torch-linear-ce).

Every row: modes fwd, bwd, fwd+bwd; time = median of CUDA-event timings after warm-ups; memory =
peak allocated bytes above those live before the call; its arithmetic, package version and
whether its forward already computes the gradients. Then each row's accuracy: loss, dE and dC
against float64 at --accuracy-shape, same recipe and β. --filter-probe adds the paper's kernel
with its gradient filter switched on (paper-filter) and data on which a dropped −β/|V| term
shows (cce-offset). Each system runs in its own process. Writes JSON that
`deno task table3 --external FILE` merges. docs/peers.md says how to get the systems.

usage: python3 scripts/torch_peers.py --out F.json [--n 8192 --v 256000 --d 2304 --dtype bf16
       --beta 0.1 --beta 0 --reps 10 --warmup 3 --methods baseline,compiled,chunked,matmul
       --arith bf16,fp32 --fp32-methods baseline,chunked,matmul --systems LIST|none
       --paper-cce DIR --apple-cce DIR --liger DIR --filter-probe
       --accuracy-shape 2048x32000x2304|none --timeout-s 600]
"""
import sys

from peers.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
