/**
 * The GEMM core's vector loads ([k][row] staging, along the rows of transposed operands, mixed
 * dtypes) and split-K, against float64 (testing/matmul_case.ts); the scalar paths, sharding and
 * thread-major staging are in kernels/matmul_test.ts. Two files, so that their shaders compile
 * in two test processes (lavapipe takes minutes for each of the large tiles).
 */
import assert from "node:assert/strict";
import { createTensor, download, fromHost, poison } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { roundArray } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";
import { autoSplitK, prepareMatmul } from "./matmul.ts";
import {
  TILE_HW,
  TILE_HW_512,
  TILE_HW_8X16,
  TILE_HW_WIDE,
  TILE_LARGE,
  TILE_SMALL,
  tileResidency,
} from "./gemm_codegen.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";
import { runCase } from "../testing/matmul_case.ts";

Deno.test({
  name: "matmul: vector loads and [k][row] staging, odd M/N, K a multiple of the width",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    const tiles = [
      { ...TILE_SMALL, vec: true },
      { ...TILE_SMALL, bk: 8, vec: true },
      { ...TILE_SMALL, bk: 8, vec: true, stage2d: true },
      { ...TILE_SMALL, stage2d: true },
      // [k slot][k in slot][row] staging: 16-bit vectors fill a slot (constant positions), f32
      // vectors, transposed operands and scalar loads go through the general index
      { ...TILE_SMALL, vec: true, stage2d: true, kSplit: 8 },
      { ...TILE_SMALL, bk: 8, vec: true, stage2d: true, kSplit: 8 },
      { ...TILE_SMALL, stage2d: true, kSplit: 4 },
    ];
    for (const tile of tiles) {
      for (const dtype of dtypes) {
        // K = 40, 32: vector variant (multiple of 8 and 4); K = 37: the scalar fallback; with
        // K-steps 8 and 16 the K-tile counts are odd and even
        for (const K of [40, 37, 32]) {
          for (const [aTrans, bTrans] of [[false, false], [false, true], [true, false]]) {
            await runCase(ctx, { M: 37, N: 70, K, dtype, aTrans, bTrans, tile });
          }
        }
      }
    }
    // the 128×256 tile (8×16 per thread) of the f32 logits product, odd M/N, vector and scalar K
    for (const dtype of ["bf16", "f32"] as const) {
      for (const K of [40, 37]) {
        for (const [aTrans, bTrans] of [[false, false], [true, false]]) {
          await runCase(ctx, { M: 131, N: 270, K, dtype, aTrans, bTrans, tile: TILE_HW_WIDE });
        }
      }
    }
    // the baseline's dE layout on TILE_HW_8X16 (f32 A, B read transposed), split 6 ways, and the
    // chunked method's (bf16 A) split 5 ways
    for (const [dtype, splitK] of [["f32", 6], ["bf16", 5]] as const) {
      await runCase(ctx, {
        M: 259,
        N: 141,
        K: 1608,
        dtype,
        bDtype: "bf16",
        aTrans: false,
        bTrans: true,
        tile: TILE_HW_8X16,
        splitK,
      });
    }
    // the baseline's dE on TILE_HW_512 (512 threads of 8×8 on 128×256), split 12 ways
    await runCase(ctx, {
      M: 259,
      N: 300,
      K: 1608,
      dtype: "f32",
      bDtype: "bf16",
      aTrans: false,
      bTrans: true,
      tile: TILE_HW_512,
      splitK: 12,
    });
    // the compiled method's dEᵀ = Cᵀ·Gᵀ: bf16 A read transposed, bf16 B as held, split 2 ways
    await runCase(ctx, {
      M: 141,
      N: 259,
      K: 1608,
      dtype: "bf16",
      aTrans: true,
      bTrans: false,
      tile: TILE_HW,
      splitK: 2,
    });
    // 128×128 tiles with 8×16 or 16×8 per thread
    for (const [tm, tn] of [[8, 16], [16, 8]]) {
      const tile = { bm: 128, bn: 128, bk: 16, tm, tn, vec: true, stage2d: true };
      for (const [aTrans, bTrans] of [[false, false], [true, true]]) {
        await runCase(ctx, { M: 259, N: 141, K: 40, dtype: "bf16", aTrans, bTrans, tile });
      }
    }
    // sharded rows (offsets are multiples of K), and K split across shards of a transposed B
    await runCase(ctx, {
      M: 45,
      N: 51,
      K: 48,
      dtype: "bf16",
      aTrans: false,
      bTrans: false,
      shardRows: 7,
      tile: tiles[2],
    });
    await runCase(ctx, {
      M: 45,
      N: 51,
      K: 48,
      dtype: "bf16",
      aTrans: false,
      bTrans: true,
      shardRows: 12,
      tile: tiles[3],
    });
  },
});

Deno.test({
  name: "matmul: vector loads along the rows of transposed operands, mixed dtypes, every layout",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    const tile = { ...TILE_SMALL, vec: true, stage2d: true };
    for (const dtype of dtypes) {
      for (const [aTrans, bTrans] of [[false, false], [false, true], [true, false], [true, true]]) {
        // M, N multiples of 8 (not of the tile): every operand takes vector loads
        await runCase(ctx, {
          M: 40,
          N: 72,
          K: 48,
          dtype,
          aTrans,
          bTrans,
          tile,
          expect: { vecA: true, vecB: true, splitK: 1 },
        });
        // odd M, N, K: the scalar fallback of the same kernel family
        await runCase(ctx, {
          M: 37,
          N: 69,
          K: 29,
          dtype,
          aTrans,
          bTrans,
          tile,
          expect: { vecA: false, vecB: false, splitK: 1 },
        });
      }
    }
    // dE = G·C and dC = Gᵀ·E of the materialised methods: f32 A, 16-bit B held transposed
    for (const aTrans of [false, true]) {
      await runCase(ctx, {
        M: 48,
        N: 56,
        K: 40,
        dtype: "f32",
        bDtype: "bf16",
        aTrans,
        bTrans: true,
        tile,
        expect: { vecA: true, vecB: true, splitK: 1 },
      });
    }
    // flat and [k][row] staging, with transposed vector loads
    for (
      const t of [
        { ...TILE_SMALL, vec: true },
        { ...tile, bk: 8 },
        { ...TILE_LARGE, vec: true, stage2d: true },
      ]
    ) {
      await runCase(ctx, {
        M: 24,
        N: 40,
        K: 37,
        dtype: "bf16",
        aTrans: true,
        bTrans: true,
        tile: t,
        expect: { vecA: true, vecB: true, splitK: 1 },
      });
    }
  },
});

Deno.test({
  name: "matmul: split-K at odd sizes (skinny output, long K), summed in a fixed order",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const tile = { ...TILE_SMALL, vec: true, stage2d: true };
    for (const [aTrans, bTrans] of [[false, false], [false, true], [true, false], [true, true]]) {
      // 3 slices of a K = 1037 product; the last slice is short
      await runCase(ctx, {
        M: 13,
        N: 70,
        K: 1037,
        dtype: "bf16",
        aTrans,
        bTrans,
        tile,
        splitK: 3,
        expect: { vecA: false, vecB: false, splitK: 3 },
      });
    }
    // vector loads in every slice, f32 × bf16, accumulating into the output, sharded operands
    await runCase(ctx, {
      M: 24,
      N: 40,
      K: 1040,
      dtype: "f32",
      bDtype: "bf16",
      aTrans: false,
      bTrans: true,
      tile,
      splitK: 7,
      accumulate: true,
      expect: { vecA: true, vecB: true, splitK: 7 },
    });
    await runCase(ctx, {
      M: 45,
      N: 51,
      K: 301,
      dtype: "f32",
      aTrans: true,
      bTrans: false,
      shardRows: 100,
      tile: TILE_SMALL,
      splitK: 4,
    });
  },
});

Deno.test({
  name:
    "matmul: split-K is bitwise reproducible and the automatic choice depends on the shape only",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const tile = { ...TILE_SMALL, vec: true, stage2d: true };
    const M = 9, N = 33, K = 2000;
    const a = fromHost(
      ctx,
      { dtype: "bf16", rows: M, cols: K, role: "input", label: "A" },
      roundArray(randomArray(M * K, 5), "bf16"),
    );
    const b = fromHost(
      ctx,
      { dtype: "bf16", rows: N, cols: K, role: "input", label: "B" },
      roundArray(randomArray(N * K, 6), "bf16"),
    );
    const mm = await prepareMatmul(ctx, {
      tile,
      aDtype: "bf16",
      bDtype: "bf16",
      aTrans: false,
      bTrans: false,
    });
    const runs: Float32Array[] = [];
    for (let r = 0; r < 2; r++) {
      const out = createTensor(ctx, {
        dtype: "f32",
        rows: M,
        cols: N,
        role: "output",
        label: "out",
      });
      poison(ctx, out);
      const rec = new Recorder(ctx);
      mm.record(rec, {
        a: { tensor: a, trans: false },
        b: { tensor: b, trans: false },
        out,
        splitK: 5,
      });
      await rec.finish();
      runs.push(await download(ctx, out));
      out.destroy();
    }
    assert.deepEqual(new Uint32Array(runs[0].buffer), new Uint32Array(runs[1].buffer));
    a.destroy();
    b.destroy();
    // one 128×128 workgroup an SM: 132 slots. The paper shape's Liger dE chunk (128 × 2304,
    // K = 256,000: 18 tiles) takes 22 slices (396 workgroups, 3 whole waves); dE = G·C of all
    // rows (1,152 tiles, 0.97 of 9 waves either way within the byte limit) one; the logits none
    const hw = autoSplitK({ m: 128, n: 2304, k: 256000, tile: TILE_LARGE, software: false });
    assert.equal(hw, 22);
    assert.equal(autoSplitK({ m: 8192, n: 2304, k: 256000, tile: TILE_LARGE, software: false }), 1);
    assert.equal(autoSplitK({ m: 8192, n: 256000, k: 2304, tile: TILE_LARGE, software: false }), 1);
    assert.equal(autoSplitK({ m: 128, n: 2304, k: 256000, tile: TILE_LARGE, software: true }), 1);
    // never slices thinner than 16 K-steps
    assert.equal(autoSplitK({ m: 16, n: 16, k: 600, tile: TILE_LARGE, software: false }), 2);
    // regions dispatched one after the other fill their own waves: dEᵀ (2304 × 8192) over two
    // shards of 4096 columns is 2 × 576 tiles, 0.873 of 5 waves each unsplit, 0.97 split 2 ways
    const dEt = { m: 2304, n: 8192, k: 256000, tile: TILE_LARGE, software: false };
    assert.equal(autoSplitK(dEt), 1);
    assert.equal(autoSplitK({ ...dEt, regions: [{ m: 2304, n: 4096 }, { m: 2304, n: 4096 }] }), 2);
    // upTo: past the byte limit (8 slices of 2048 × 2304: 0.97 of their waves) up to 12, of
    // which 11 fill whole waves; on a software adapter none
    const up = { m: 2048, n: 2304, k: 256000, tile: TILE_HW_512, software: false };
    assert.equal(autoSplitK(up), 8);
    assert.equal(autoSplitK({ ...up, upTo: 12 }), 11);
    assert.equal(autoSplitK({ ...up, upTo: 12, k: 600 }), 2); // 16 K-steps a slice at least
    assert.equal(autoSplitK({ ...up, upTo: 12, software: true }), 1);
    // residency: two 128-thread 8×16 workgroups an SM (264 slots): the Liger chunk takes 44
    assert.equal(tileResidency(TILE_HW_8X16), 2);
    assert.equal(tileResidency(TILE_LARGE), 1);
    assert.equal(
      autoSplitK({ m: 128, n: 2304, k: 256000, tile: TILE_HW_8X16, software: false }),
      44,
    );
  },
});
