/**
 * The tensor-core product run in its emulated mode (kernels/tc/tc_codegen.ts) on the test adapter,
 * against float64 products of the f16-exact (or split) inputs, at odd shapes: vector and scalar
 * loads, the three layouts the methods use, hi/lo split operands, scales far from 1, split-K,
 * accumulation and sharded tensors. The native kernels' WGSL is validated by tc_null_test.ts.
 */
import assert from "node:assert/strict";
import { GpuContext } from "../../gpu/context.ts";
import { Recorder } from "../../gpu/recorder.ts";
import { createTensor, download, fromHost, upload } from "../../gpu/tensor.ts";
import { roundArray } from "../../core/dtype.ts";
import { GPU_TEST, randomArray, testContext } from "../../testing/gpu.ts";
import { prepareTcMatmul } from "./tc_matmul.ts";
import { prepareTcScales } from "./tc_scale.ts";
import type { TcDtype } from "./tc_codegen.ts";
import type { TcTile } from "./tc_tiles.ts";

/** Small tiles that fit lavapipe's 32 KiB of workgroup memory with the emulated accumulators. */
const T_2X1: TcTile = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };
const T_1X2: TcTile = { sgRows: 1, sgCols: 4, mt: 1, nt: 2, bk: 16, dbuf: true };

interface Case {
  m: number;
  n: number;
  k: number;
  a: TcDtype;
  b: TcDtype;
  aTrans: boolean;
  bTrans: boolean;
  split?: boolean;
  tile: TcTile;
  splitK?: number;
  accumulate?: boolean;
  alpha?: number;
  /** Scales of A's and B's entries. */
  sa?: number;
  sb?: number;
  expectVec?: [boolean, boolean];
}

async function check(ctx: GpuContext, c: Case, seed: number): Promise<void> {
  const a = roundArray(randomArray(c.m * c.k, seed, c.sa ?? 1), c.a);
  const b = roundArray(randomArray(c.n * c.k, seed + 1, c.sb ?? 1), c.b);
  const A = fromHost(ctx, {
    dtype: c.a,
    rows: c.aTrans ? c.k : c.m,
    cols: c.aTrans ? c.m : c.k,
    role: "input",
    label: "A",
  }, a);
  const B = fromHost(ctx, {
    dtype: c.b,
    rows: c.bTrans ? c.k : c.n,
    cols: c.bTrans ? c.n : c.k,
    role: "input",
    label: "B",
  }, b);
  const out = createTensor(ctx, {
    dtype: "f32",
    rows: c.m,
    cols: c.n,
    role: "output",
    label: "out",
  });
  const init = randomArray(c.m * c.n, seed + 2);
  if (c.accumulate) upload(ctx, out, init);
  const mm = await prepareTcMatmul(ctx, {
    tile: c.tile,
    aDtype: c.a,
    bDtype: c.b,
    aTrans: c.aTrans,
    bTrans: c.bTrans,
    split: c.split,
    mode: "emulated",
  });
  const scales = await prepareTcScales(ctx);
  const bufs = scales.allocate(ctx);
  try {
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      scales.record(rec, { tensors: [A, B], into: bufs });
      mm.record(rec, {
        a: { tensor: A, trans: c.aTrans },
        b: { tensor: B, trans: c.bTrans },
        out,
        accumulate: c.accumulate,
        alpha: c.alpha,
        splitK: c.splitK,
        scales: { buffer: bufs.scales, a: 0, b: 1 },
      });
      await rec.finish();
    });
    const got = await download(ctx, out);
    if (c.expectVec) {
      assert.deepEqual([mm.lastVariant.vecA, mm.lastVariant.vecB], c.expectVec, "load variant");
    }
    // f16-exact inputs: f32 accumulation only; split f32 inputs: ~22 significant bits
    const tol = c.a === "f32" && !c.split ? 2 ** -10 : 2 ** -20;
    for (let i = 0; i < c.m; i++) {
      for (let j = 0; j < c.n; j++) {
        let s = 0, mag = 0;
        for (let k = 0; k < c.k; k++) {
          const x = c.aTrans ? a[k * c.m + i] : a[i * c.k + k];
          const y = c.bTrans ? b[k * c.n + j] : b[j * c.k + k];
          s += x * y;
          mag += Math.abs(x * y);
        }
        const alpha = c.alpha ?? 1;
        const want = alpha * s + (c.accumulate ? init[i * c.n + j] : 0);
        const g = got[i * c.n + j];
        const bound = tol * Math.abs(alpha) * mag + 1e-6 * Math.abs(want) + 1e-30;
        if (!(Math.abs(g - want) <= bound)) {
          assert.fail(
            `${JSON.stringify({ ...c, tile: undefined })}: out[${i}][${j}] = ${g}, want ${want}`,
          );
        }
      }
    }
  } finally {
    for (const t of [A, B, out]) t.destroy();
    bufs.scales.destroy();
    bufs.maxBits.destroy();
    mm.release();
  }
}

Deno.test(
  "tc matmul (emulated): E·Cᵀ layout, bf16, vector and scalar loads",
  GPU_TEST,
  async () => {
    const ctx = await testContext();
    const base = { a: "bf16", b: "bf16", aTrans: false, bTrans: false, tile: T_2X1 } as const;
    await check(ctx, { ...base, m: 70, n: 45, k: 40, expectVec: [true, true] }, 1);
    await check(
      ctx,
      { ...base, m: 37, n: 29, k: 37, sa: 3e4, sb: 1e-5, expectVec: [false, false] },
      2,
    );
  },
);

Deno.test("tc matmul (emulated): Gᵀ·E layout, split f32 A, sharded", GPU_TEST, async () => {
  const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
  try {
    const c = {
      a: "f32",
      b: "bf16",
      aTrans: true,
      bTrans: true,
      split: true,
      tile: T_1X2,
    } as const;
    await check(ctx, { ...c, m: 66, n: 72, k: 99, sa: 1e-4 }, 3);
  } finally {
    ctx.destroy();
  }
});

Deno.test("tc matmul (emulated): G·C layout, accumulate, split-K, alpha", GPU_TEST, async () => {
  const ctx = await testContext();
  const c = { a: "f32", b: "f16", aTrans: false, bTrans: true, split: true, tile: T_1X2 } as const;
  await check(ctx, { ...c, m: 43, n: 80, k: 200, accumulate: true, alpha: -0.75, splitK: 3 }, 4);
  await check(ctx, { ...c, split: false, m: 21, n: 17, k: 48, expectVec: [true, false] }, 5);
});
