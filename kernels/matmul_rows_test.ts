import assert from "node:assert/strict";
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, download, fromHost, upload } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { machineEps, roundArray } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";
import { prepareMatmul, rowView } from "./matmul.ts";
import { type GemmTile, TILE_LARGE, TILE_SMALL } from "./gemm_codegen.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

interface _Case {
  /** Logical sizes of the product. */
  M: number;
  N: number;
  K: number;
  inDtype: Dtype;
  outDtype: Dtype;
  aTrans: boolean;
  bTrans: boolean;
  /** Extra rows held before and after each operand's and the output's range. */
  pad: [number, number];
  shardRows?: number;
  accumulate?: boolean;
  alpha?: number;
  /** Default TILE_SMALL. */
  tile?: GemmTile;
  splitK?: number;
}

/**
 * Runs one product on row ranges of larger tensors and checks the range against float64 (for a
 * 16-bit output: within one spacing of the dtype, since the f32 sum may round to either
 * neighbour) and that every element outside the range kept its value.
 */
async function _run(ctx: GpuContext, c: _Case) {
  const [lo, hi] = c.pad;
  const held = (trans: boolean, rows: number, cols: number) => trans ? [cols, rows] : [rows, cols];
  const [aR, aC] = held(c.aTrans, c.M, c.K), [bR, bC] = held(c.bTrans, c.N, c.K);
  const aHost = roundArray(randomArray((aR + lo + hi) * aC, 1 + c.M), c.inDtype);
  const bHost = roundArray(randomArray((bR + lo + hi) * bC, 2 + c.N), c.inDtype);
  const mk = (rows: number, cols: number, dtype: Dtype, label: string) =>
    createTensor(ctx, {
      dtype,
      rows,
      cols,
      role: "input",
      label,
      maxRowsPerShard: c.shardRows,
    });
  const a = mk(aR + lo + hi, aC, c.inDtype, "A"), b = mk(bR + lo + hi, bC, c.inDtype, "B");
  upload(ctx, a, aHost);
  upload(ctx, b, bHost);
  const outRows = c.M + lo + hi;
  const init = roundArray(randomArray(outRows * c.N, 3, 5), c.outDtype);
  const out = fromHost(ctx, {
    dtype: c.outDtype,
    rows: outRows,
    cols: c.N,
    role: "output",
    label: "out",
    maxRowsPerShard: c.shardRows,
  }, init);
  const tile = c.tile ?? TILE_SMALL;
  const mm = await prepareMatmul(ctx, {
    tile,
    aDtype: c.inDtype,
    bDtype: c.inDtype,
    aTrans: c.aTrans,
    bTrans: c.bTrans,
    outDtype: c.outDtype,
  });
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    mm.record(rec, {
      a: { view: rowView(a, lo, lo + aR), trans: c.aTrans },
      b: { view: rowView(b, lo, lo + bR), trans: c.bTrans },
      out: rowView(out, lo, lo + c.M),
      tile,
      accumulate: c.accumulate,
      alpha: c.alpha,
      splitK: c.splitK,
    });
    await rec.finish();
  });
  const got = await download(ctx, out);
  const A = (m: number, k: number) => aHost[c.aTrans ? (lo + k) * c.M + m : (lo + m) * c.K + k];
  const B = (n: number, k: number) => bHost[c.bTrans ? (lo + k) * c.N + n : (lo + n) * c.K + k];
  const eps = machineEps(c.outDtype);
  for (let r = 0; r < outRows; r++) {
    for (let n = 0; n < c.N; n++) {
      const i = r * c.N + n;
      const m = r - lo;
      if (m < 0 || m >= c.M) {
        assert.ok(Object.is(got[i], init[i]), `${JSON.stringify(c)}: row ${r} col ${n} clobbered`);
        continue;
      }
      let s = 0;
      for (let k = 0; k < c.K; k++) s += A(m, k) * B(n, k);
      const want = (c.alpha ?? 1) * s + (c.accumulate ? init[i] : 0);
      const allowed = c.outDtype === "f32"
        ? 1e-5 * Math.sqrt(c.K) * (1 + Math.abs(want))
        : eps * Math.abs(want) + 1e-6;
      assert.ok(
        Math.abs(got[i] - want) <= allowed,
        `${JSON.stringify(c)}: out[${m}][${n}] = ${got[i]}, want ${want}`,
      );
    }
  }
  for (const t of [a, b, out]) t.destroy();
}

Deno.test({
  name: "matmul (row ranges): 16-bit outputs at odd widths and offsets, neighbours untouched",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const outDtype of ["bf16", "f16"] as const) {
      for (const [aTrans, bTrans] of [[false, false], [true, true], [false, true]]) {
        // N odd: rows alternate between even and odd first elements; pad 1 puts the range's
        // first element on an odd one; 70×133 spans several workgroups of the 64×64 tile.
        await _run(ctx, {
          M: 70,
          N: 133,
          K: 29,
          inDtype: "bf16",
          outDtype,
          aTrans,
          bTrans,
          pad: [1, 2],
        });
      }
      await _run(ctx, {
        M: 13,
        N: 37,
        K: 11,
        inDtype: "f32",
        outDtype,
        aTrans: false,
        bTrans: false,
        pad: [3, 1],
        shardRows: 4,
        alpha: -0.5,
      });
      await _run(ctx, {
        M: 1,
        N: 1,
        K: 1,
        inDtype: "f32",
        outDtype,
        aTrans: false,
        bTrans: false,
        pad: [1, 1],
      });
    }
    // split-K into a 16-bit output: the slices' f32 partials are summed, then rounded once
    for (const outDtype of ["bf16", "f16"] as const) {
      await _run(ctx, {
        M: 21,
        N: 37,
        K: 300,
        inDtype: "bf16",
        outDtype,
        aTrans: true,
        bTrans: false,
        pad: [1, 2],
        alpha: 0.75,
        splitK: 4,
      });
    }
    // The hardware tile (8×8 per thread: two groups of 4 adjacent columns per row).
    await _run(ctx, {
      M: 131,
      N: 133,
      K: 17,
      inDtype: "bf16",
      outDtype: "bf16",
      aTrans: false,
      bTrans: false,
      pad: [1, 0],
      tile: TILE_LARGE,
    });
    if (ctx.hasF16) {
      await _run(ctx, {
        M: 9,
        N: 21,
        K: 17,
        inDtype: "f16",
        outDtype: "f16",
        aTrans: false,
        bTrans: false,
        pad: [1, 0],
      });
    }
  },
});

Deno.test({
  name: "matmul (row ranges): f32 outputs on row ranges of sharded tensors, K split, accumulate",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const [aTrans, bTrans] of [[false, false], [true, true], [false, true], [true, false]]) {
      await _run(ctx, {
        M: 23,
        N: 19,
        K: 17,
        inDtype: "bf16",
        outDtype: "f32",
        aTrans,
        bTrans,
        pad: [3, 2],
        shardRows: 6,
      });
    }
    await _run(ctx, {
      M: 23,
      N: 19,
      K: 17,
      inDtype: "f32",
      outDtype: "f32",
      aTrans: true,
      bTrans: true,
      pad: [5, 0],
      shardRows: 4,
      accumulate: true,
      alpha: 0.75,
    });
    await assert.rejects(async () => {
      const t = createTensor(ctx, { dtype: "bf16", rows: 4, cols: 4, role: "input", label: "x" });
      const mm = await prepareMatmul(ctx, {
        tile: TILE_SMALL,
        aDtype: "bf16",
        bDtype: "bf16",
        aTrans: false,
        bTrans: false,
        outDtype: "bf16",
      });
      const rec = new Recorder(ctx);
      try {
        mm.record(rec, {
          a: { view: rowView(t), trans: false },
          b: { view: rowView(t), trans: false },
          out: rowView(t),
          tile: TILE_SMALL,
          accumulate: true,
        });
      } finally {
        await rec.finish();
        t.destroy();
      }
    }, /cannot accumulate into 16 bits/);
  },
});
