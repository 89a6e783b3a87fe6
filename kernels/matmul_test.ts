import assert from "node:assert/strict";
import type { Dtype } from "../core/options.ts";
import {
  TILE_HW_8X16_TM,
  TILE_HW_TM,
  TILE_HW_WIDE,
  TILE_LARGE,
  TILE_SMALL,
  validateTile,
} from "./gemm_codegen.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { runCase } from "../testing/matmul_case.ts";

Deno.test({
  name: "matmul: odd shapes, every layout and dtype, against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    for (const dtype of dtypes) {
      for (const [aTrans, bTrans] of [[false, false], [false, true], [true, true], [true, false]]) {
        await runCase(ctx, { M: 37, N: 70, K: 29, dtype, aTrans, bTrans, tile: TILE_SMALL });
      }
    }
    await runCase(ctx, {
      M: 131,
      N: 129,
      K: 33,
      dtype: "f32",
      aTrans: false,
      bTrans: false,
      tile: TILE_LARGE,
    });
    await runCase(ctx, {
      M: 1,
      N: 1,
      K: 1,
      dtype: "bf16",
      aTrans: false,
      bTrans: false,
      tile: TILE_SMALL,
    });
  },
});

Deno.test({
  name: "matmul: sharded operands and output, K split across shards, accumulate",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const [aTrans, bTrans] of [[false, false], [true, true], [false, true]]) {
      await runCase(ctx, {
        M: 45,
        N: 51,
        K: 23,
        dtype: "bf16",
        aTrans,
        bTrans,
        shardRows: 7,
        tile: TILE_SMALL,
      });
    }
    await runCase(ctx, {
      M: 45,
      N: 51,
      K: 23,
      dtype: "f32",
      aTrans: true,
      bTrans: false,
      shardRows: 10,
      tile: TILE_SMALL,
      accumulate: true,
    });
  },
});

Deno.test({
  name: "matmul: thread-major staging, odd M/N, every layout",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const tiles = [
      { ...TILE_SMALL, vec: true, threadMajor: true },
      { ...TILE_SMALL, bk: 8, tm: 8, vec: true, threadMajor: true },
      { ...TILE_SMALL, tn: 8, threadMajor: true },
    ];
    // the tile of dC = Gᵀ·E with a 16-bit G on hardware adapters, in its layout, accumulating
    // (the chunked method's dC +=) and not
    for (const accumulate of [false, true]) {
      await runCase(ctx, {
        M: 131,
        N: 137,
        K: 40,
        dtype: "bf16",
        aTrans: true,
        bTrans: true,
        tile: TILE_HW_8X16_TM,
        accumulate,
      });
    }
    // the tile of the 16-bit logits on hardware adapters, in their layout
    await runCase(ctx, {
      M: 131,
      N: 137,
      K: 40,
      dtype: "bf16",
      aTrans: false,
      bTrans: false,
      tile: TILE_HW_TM,
    });
    for (const tile of tiles) {
      for (const dtype of ["bf16", "f32"] as const) {
        // K = 40: vector loads, K = 37: scalar ones
        for (const K of [40, 37]) {
          for (const [aTrans, bTrans] of [[false, false], [true, false], [false, true]]) {
            await runCase(ctx, { M: 69, N: 70, K, dtype, aTrans, bTrans, tile });
          }
        }
      }
    }
  },
});

Deno.test("gemm tiles: kSplit needs [k][row] staging and a K-step it divides", () => {
  validateTile({ ...TILE_SMALL, stage2d: true, kSplit: 8 });
  validateTile(TILE_HW_WIDE);
  assert.throws(() => validateTile({ ...TILE_SMALL, kSplit: 8 }), /unsupported GEMM tile/);
  assert.throws(() => validateTile({ ...TILE_SMALL, stage2d: true, kSplit: 5 }), /unsupported/);
  assert.throws(() => validateTile({ ...TILE_SMALL, stage2d: true, kSplit: 0 }), /unsupported/);
  assert.throws(
    () => validateTile({ ...TILE_SMALL, threadMajor: true, kSplit: 8 }),
    /unsupported GEMM tile/,
  );
});
