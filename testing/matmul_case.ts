/**
 * One GEMM case for the matmul tests (kernels/matmul_test.ts, kernels/matmul_vec_test.ts): A and
 * B drawn at the given shape, dtypes and layouts, the output poisoned (or filled, to accumulate),
 * one product recorded with the given tile, and every element against float64.
 * @module
 */
import assert from "node:assert/strict";
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, download, fromHost, poison, upload } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { roundArray } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import type { TILE_SMALL } from "../kernels/gemm_codegen.ts";
import { randomArray } from "./gpu.ts";

/** out[m][n] = Σ_k A(m,k)·B(n,k) in float64, from row-major held tensors. */
export function refMatmul(
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

/** Runs one product with the case's shape, dtypes, layouts and tile; asserts it against float64. */
export async function runCase(
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
    /** B's dtype when it differs from A's (default `dtype`). */
    bDtype?: Dtype;
    splitK?: number;
    /** The variant the launcher must pick (vector loads per operand, K slices). */
    expect?: { vecA: boolean; vecB: boolean; splitK: number };
  },
) {
  const { M, N, K } = o;
  const bDtype = o.bDtype ?? o.dtype;
  const aHost = roundArray(randomArray(M * K, 1 + M), o.dtype);
  const bHost = roundArray(randomArray(N * K, 2 + N), bDtype);
  const a = fromHost(ctx, {
    dtype: o.dtype,
    rows: o.aTrans ? K : M,
    cols: o.aTrans ? M : K,
    role: "input",
    label: "A",
    maxRowsPerShard: o.shardRows,
  }, aHost);
  const b = fromHost(ctx, {
    dtype: bDtype,
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
    upload(ctx, out, init);
  } else poison(ctx, out);
  const mm = await prepareMatmul(ctx, {
    tile: o.tile,
    aDtype: o.dtype,
    bDtype,
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
      splitK: o.splitK,
    });
    await rec.finish();
  });
  if (o.expect) assert.deepEqual(mm.lastVariant, o.expect, JSON.stringify(o));
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
