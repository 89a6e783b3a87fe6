import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import type { GpuContext } from "../gpu/context.ts";
import { roundArray } from "../core/dtype.ts";
import { type Dtype, resolveOptions } from "../core/options.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { prepareFusedForward } from "../kernels/fused/forward.ts";
import {
  gemmMainloop,
  gemmSharedBytes,
  type GemmTile,
  TILE_SMALL,
} from "../kernels/gemm_codegen.ts";
import { describeTile, tileFromDescription, tileLayout, withLayout } from "./gemm_layouts.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** The product of one tile on random operands (M×K and N×K, held as `trans` says), downloaded. */
async function product(
  ctx: GpuContext,
  o: { M: number; N: number; K: number; dtype: Dtype; aTrans: boolean; bTrans: boolean },
  tile: GemmTile,
): Promise<Float32Array> {
  const { M, N, K, dtype } = o;
  const mk = (rows: number, cols: number, seed: number, label: string) =>
    fromHost(
      ctx,
      { dtype, rows, cols, role: "input", label },
      roundArray(randomArray(rows * cols, seed), dtype),
    );
  const a = o.aTrans ? mk(K, M, 1, "A") : mk(M, K, 1, "A");
  const b = o.bTrans ? mk(K, N, 2, "B") : mk(N, K, 2, "B");
  const out = createTensor(ctx, { dtype: "f32", rows: M, cols: N, role: "output", label: "out" });
  const mm = await prepareMatmul(ctx, {
    tile,
    aDtype: dtype,
    bDtype: dtype,
    aTrans: o.aTrans,
    bTrans: o.bTrans,
  });
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    mm.record(rec, { a: { tensor: a, trans: o.aTrans }, b: { tensor: b, trans: o.bTrans }, out });
    await rec.finish();
  });
  const got = await download(ctx, out);
  for (const t of [a, b, out]) t.destroy();
  return got;
}

Deno.test("gemm layouts: attached to a tile, kept by spreads, described for reports", () => {
  const t = withLayout({ ...TILE_SMALL, bk: 8 }, { dbuf: true });
  assert.deepEqual(tileLayout(t), { dbuf: true });
  assert.deepEqual(tileLayout({ ...t, vec: true }), { dbuf: true });
  assert.deepEqual(tileLayout(withLayout(t, { warpTile: true })), { dbuf: true, warpTile: true });
  assert.deepEqual(tileLayout(TILE_SMALL), {});
  // the staging doubles; JSON ignores the generator, the description names the switches
  assert.equal(gemmSharedBytes(t), 2 * gemmSharedBytes({ ...TILE_SMALL, bk: 8 }));
  assert.equal(JSON.stringify(t), JSON.stringify({ ...TILE_SMALL, bk: 8 }));
  const d = JSON.parse(JSON.stringify(describeTile(t)));
  assert.equal(d.dbuf, true);
  assert.deepEqual(tileLayout(tileFromDescription(d)), { dbuf: true });
  // a double-buffered main loop has one barrier per K-step
  const o = {
    a: { dtype: "f32" as const, contig: "k" as const },
    b: { dtype: "f32" as const, contig: "k" as const },
    aBuf: "a",
    bBuf: "b",
    ...Object.fromEntries(
      ["M", "N", "K", "m0", "n0", "aOff", "sAm", "sAk", "bOff", "sBn", "sBk"].map((k) => [k, "1u"]),
    ),
  } as const;
  const barriers = (tile: GemmTile) =>
    (gemmMainloop({ ...o, tile } as Parameters<typeof gemmMainloop>[0]).match(
      /workgroupBarrier/g,
    ) ?? []).length;
  assert.equal(barriers(TILE_SMALL), 2);
  assert.equal(barriers(withLayout(TILE_SMALL, { dbuf: true })), 4);
});

Deno.test({
  name: "gemm layouts: products bitwise those of the core layout (same sums in the same order)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cases: [GemmTile, GemmTile[]][] = [
      [TILE_SMALL, [
        withLayout(TILE_SMALL, { dbuf: true }),
        withLayout(TILE_SMALL, { mFirst: true }),
      ]],
      [{ ...TILE_SMALL, bk: 8, vec: true, stage2d: true, kSplit: 8 }, [
        withLayout({ ...TILE_SMALL, bk: 8, vec: true, stage2d: true, kSplit: 8 }, { dbuf: true }),
      ]],
      [{ ...TILE_SMALL, bk: 8, tm: 8, vec: true, threadMajor: true }, [
        withLayout({ ...TILE_SMALL, bk: 8, tm: 8, vec: true, threadMajor: true }, { dbuf: true }),
      ]],
      [{ ...TILE_SMALL, tn: 8, threadMajor: true }, [
        withLayout({ ...TILE_SMALL, tn: 8, threadMajor: true }, { warpTile: true }),
      ]],
      [{ ...TILE_SMALL, vec: true, stage2d: true }, [
        withLayout({ ...TILE_SMALL, vec: true, stage2d: true }, { warpTile: true, mFirst: true }),
      ]],
    ];
    for (const [core, layouts] of cases) {
      for (const dtype of ["bf16", "f32"] as const) {
        // K = 40: vector loads, 37: scalar ones; odd and even K-tile counts for the double buffer
        for (const K of [40, 37]) {
          for (const [aTrans, bTrans] of [[false, false], [true, true]]) {
            const shape = { M: 69, N: 70, K, dtype, aTrans, bTrans };
            const want = await product(ctx, shape, core);
            assert.ok(want.every(Number.isFinite));
            for (const t of layouts) {
              const got = await product(ctx, shape, t);
              assert.deepEqual(
                got,
                want,
                `${JSON.stringify(describeTile(t))} ${JSON.stringify(shape)}`,
              );
            }
          }
        }
      }
    }
  },
});

Deno.test({
  name: "gemm layouts: the fused forward on a double-buffered tile, bitwise the core's",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const spec = { n: 70, v: 257, d: 40, dtype: "bf16" as const };
    const opts = resolveOptions({ beta: 0.1, softcap: 20 });
    const e = fromHost(ctx, {
      dtype: "bf16",
      rows: spec.n,
      cols: spec.d,
      role: "input",
      label: "E",
    }, roundArray(randomArray(spec.n * spec.d, 5), "bf16"));
    const c = fromHost(ctx, {
      dtype: "bf16",
      rows: spec.v,
      cols: spec.d,
      role: "input",
      label: "C",
    }, roundArray(randomArray(spec.v * spec.d, 6), "bf16"));
    const targets = fromHost(ctx, {
      dtype: "i32",
      rows: spec.n,
      cols: 1,
      role: "input",
      label: "t",
    }, Int32Array.from({ length: spec.n }, (_, i) => (i * 37) % spec.v));
    const run = async (tile: GemmTile) => {
      const ff = await prepareFusedForward(ctx, { spec, opts, tile, vocabSplits: 2, roundRows: 2 });
      const vec = (label: string) =>
        createTensor(ctx, { dtype: "f32", rows: spec.n, cols: 1, role: "output", label });
      const lse = vec("lse"), lossRows = vec("loss rows");
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        ff.record(rec, { e, c, targets, lse, lossRows });
        await rec.finish();
      });
      const out = [await download(ctx, lse), await download(ctx, lossRows)];
      lse.destroy();
      lossRows.destroy();
      return out;
    };
    for (
      const core of [{ ...TILE_SMALL, bk: 8, vec: true, stage2d: true }, {
        ...TILE_SMALL,
        bk: 8,
        vec: true,
      }]
    ) {
      const want = await run(core);
      assert.ok(want[0].every(Number.isFinite));
      assert.deepEqual(await run(withLayout(core, { dbuf: true })), want);
    }
    for (const t of [e, c, targets]) t.destroy();
  },
});
