import assert from "node:assert/strict";
import { GpuContext } from "../gpu/context.ts";
import { createTensor, download, fromHost, poison } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { roundArray } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";
import { prepareMatmul } from "./matmul.ts";
import { TILE_LARGE, TILE_SMALL } from "./gemm_codegen.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** out[m][n] = Σ_k A(m,k)·B(n,k) in float64, from row-major held tensors. */
function refMatmul(
  a: Float32Array,
  aTrans: boolean,
  b: Float32Array,
  bTrans: boolean,
  M: number,
  N: number,
  K: number,
): Float64Array {
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) {
        s += a[aTrans ? k * M + m : m * K + k] * b[bTrans ? k * N + n : n * K + k];
      }
      out[m * N + n] = s;
    }
  }
  return out;
}

async function runCase(
  ctx: GpuContext,
  o: {
    M: number;
    N: number;
    K: number;
    dtype: Dtype;
    aTrans: boolean;
    bTrans: boolean;
    shardRows?: number;
    tile: typeof TILE_SMALL;
    accumulate?: boolean;
  },
) {
  const { M, N, K } = o;
  const aHost = roundArray(randomArray(M * K, 1 + M), o.dtype);
  const bHost = roundArray(randomArray(N * K, 2 + N), o.dtype);
  const a = fromHost(ctx, {
    dtype: o.dtype,
    rows: o.aTrans ? K : M,
    cols: o.aTrans ? M : K,
    role: "input",
    label: "A",
    maxRowsPerShard: o.shardRows,
  }, aHost);
  const b = fromHost(ctx, {
    dtype: o.dtype,
    rows: o.bTrans ? K : N,
    cols: o.bTrans ? N : K,
    role: "input",
    label: "B",
    maxRowsPerShard: o.shardRows,
  }, bHost);
  const out = createTensor(ctx, {
    dtype: "f32",
    rows: M,
    cols: N,
    role: "output",
    label: "out",
    maxRowsPerShard: o.shardRows,
  });
  const init = randomArray(M * N, 3);
  if (o.accumulate) {
    const { upload } = await import("../gpu/tensor.ts");
    upload(ctx, out, init);
  } else poison(ctx, out);
  const mm = await prepareMatmul(ctx, {
    tile: o.tile,
    aDtype: o.dtype,
    bDtype: o.dtype,
    aTrans: o.aTrans,
    bTrans: o.bTrans,
  });
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    mm.record(rec, {
      a: { tensor: a, trans: o.aTrans },
      b: { tensor: b, trans: o.bTrans },
      out,
      tile: o.tile,
      accumulate: o.accumulate,
    });
    await rec.finish();
  });
  const got = await download(ctx, out);
  const want = refMatmul(aHost, o.aTrans, bHost, o.bTrans, M, N, K);
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const w = want[i] + (o.accumulate ? init[i] : 0);
    const err = Math.abs(got[i] - w);
    assert.ok(Number.isFinite(got[i]), `element ${i} not written (${got[i]})`);
    worst = Math.max(worst, err / (1 + Math.abs(w)));
  }
  assert.ok(worst < 1e-5 * Math.sqrt(K), `max rel err ${worst} for ${JSON.stringify(o)}`);
  a.destroy();
  b.destroy();
  out.destroy();
}

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
  name: "matmul: vector loads and double-buffered staging, odd M/N, K a multiple of the width",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    const tiles = [
      { ...TILE_SMALL, vec: true },
      { ...TILE_SMALL, dbuf: true },
      { ...TILE_SMALL, bk: 8, vec: true, dbuf: true },
      { ...TILE_SMALL, bk: 8, vec: true, dbuf: true, stage2d: true },
      { ...TILE_SMALL, stage2d: true },
    ];
    for (const tile of tiles) {
      for (const dtype of dtypes) {
        // K = 40: vector variant (multiple of 8 and 4); K = 37: the scalar fallback
        for (const K of [40, 37]) {
          for (const [aTrans, bTrans] of [[false, false], [false, true], [true, false]]) {
            await runCase(ctx, { M: 37, N: 70, K, dtype, aTrans, bTrans, tile });
          }
        }
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
