import assert from "node:assert/strict";
import type { GpuContext } from "../gpu/context.ts";
import { benchConfig } from "./fused_backward_configs.ts";

Deno.test("fused backward bench: bt<TPT>x<VPT>k<BK>w<W> names the backward tile's thread shape", () => {
  const ctx = {} as GpuContext;
  assert.deepEqual(benchConfig("bt4x8k16w2")!(ctx).kernels?.backward?.tile, {
    tokens: 128,
    vocab: 64,
    bk: 16,
    tokensPerThread: 4,
    vocabPerThread: 8,
    gradWiden: 2,
  });
  assert.equal(benchConfig("bt8x8k8w1")!(ctx).kernels?.backward?.tile?.bk, 8);
  // -kgwide: the kept g pass keeps BACKWARD_TILE_WIDE's thread shape (8 tokens × 4 entries)
  const kg = benchConfig("bt4x8k16w2-kgwide")!(ctx).kernels?.backward;
  assert.equal(kg?.tile?.vocabPerThread, 8);
  assert.deepEqual(kg?.dEGather, {
    keptTile: { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4, stage2d: true },
  });
  assert.equal(benchConfig("bt4x8k16w2")!(ctx).kernels?.backward?.dEGather, undefined);
  for (const bad of ["bt8x8k16w3", "bt8x8k16", "bt8x8", "bt4x8k16w2-kg"]) {
    assert.equal(benchConfig(bad), undefined);
  }
});
