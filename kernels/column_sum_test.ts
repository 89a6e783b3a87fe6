import assert from "node:assert/strict";
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { roundArray } from "../core/dtype.ts";
import { type Dtype, IGNORE_INDEX } from "../core/options.ts";
import {
  columnSumPlan,
  MAX_CHUNKS,
  prepareColumnSum,
  prepareWeightedColumnSum,
} from "./column_sum.ts";
import { columnVector, GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** Runs the column sum of a v×d matrix and checks it against float64 within `ulps`·2⁻²⁴·Σ|x|. */
async function check(
  ctx: GpuContext,
  o: { v: number; d: number; dtype: Dtype; offset?: number; shardRows?: number },
) {
  const host = roundArray(
    randomArray(o.v * o.d, o.v + o.d).map((x) => x + (o.offset ?? 0.25)),
    o.dtype,
  );
  const c = fromHost(ctx, {
    dtype: o.dtype,
    rows: o.v,
    cols: o.d,
    role: "input",
    label: "C",
    maxRowsPerShard: o.shardRows,
  }, host);
  const out = createTensor(ctx, { dtype: "f32", rows: o.d, cols: 1, role: "output", label: "s" });
  const cs = await prepareColumnSum(ctx, { dtype: o.dtype });
  const run = async () => {
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      cs.record(rec, { c, out });
      await rec.finish();
    });
    return await download(ctx, out);
  };
  const got = await run();
  let worst = 0, naiveWorst = 0;
  for (let k = 0; k < o.d; k++) {
    let want = 0, abs = 0, naive = 0;
    for (let r = 0; r < o.v; r++) {
      want += host[r * o.d + k];
      abs += Math.abs(host[r * o.d + k]);
      naive = Math.fround(naive + host[r * o.d + k]);
    }
    assert.ok(Number.isFinite(got[k]), `column ${k} not written (${got[k]})`);
    worst = Math.max(worst, Math.abs(got[k] - want) / abs / 2 ** -24);
    naiveWorst = Math.max(naiveWorst, Math.abs(naive - want) / abs / 2 ** -24);
  }
  assert.ok(worst <= 48, `${JSON.stringify(o)}: error ${worst.toFixed(2)} ulps of Σ|x|`);
  // bitwise reproducible
  assert.deepEqual(await run(), got);
  c.destroy();
  out.destroy();
  return { worst, naiveWorst };
}

Deno.test({
  name: "column_sum: several thousand rows, every dtype, against float64",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    for (const dtype of dtypes) {
      const r = await check(ctx, { v: 6001, d: 37, dtype });
      // the blocked sum is well inside a plain running sum's error at this size
      assert.ok(r.worst < r.naiveWorst, `${dtype}: blocked ${r.worst}, naive ${r.naiveWorst}`);
    }
    await check(ctx, { v: 1, d: 1, dtype: "f32" });
    await check(ctx, { v: 3, d: 65, dtype: "bf16", offset: 0 });
    // more rows than MAX_CHUNKS·256: chunks grow
    await check(ctx, { v: MAX_CHUNKS * 256 + 77, d: 3, dtype: "f32", offset: 1 });
  },
});

Deno.test({
  name: "column_sum: sharded C (several dispatches into one partials buffer)",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await check(ctx, { v: 3001, d: 7, dtype: "f32" }); // 146 rows per shard
      await check(ctx, { v: 999, d: 9, dtype: "bf16", shardRows: 300 });
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "column_sum: 16-byte loads (d a multiple of the width) give the scalar kernel's bits",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    for (const dtype of dtypes) {
      // d = 40: vector loads; the same columns inside a d = 41 matrix: scalar loads. Each column's
      // sum depends on its own values and the row chunking only, so the two agree bit for bit.
      for (const [v, shardRows] of [[6001, undefined], [999, 300]] as const) {
        await check(ctx, { v, d: 40, dtype, shardRows });
        const base = roundArray(randomArray(v * 40, v + 7), dtype);
        const wide = new Float32Array(v * 41);
        for (let r = 0; r < v; r++) {
          wide.set(base.subarray(r * 40, r * 40 + 40), r * 41);
          wide[r * 41 + 40] = 1;
        }
        const sums = async (host: Float32Array, d: number) => {
          const c = fromHost(ctx, {
            dtype,
            rows: v,
            cols: d,
            role: "input",
            label: "C",
            maxRowsPerShard: shardRows,
          }, host);
          const out = createTensor(ctx, {
            dtype: "f32",
            rows: d,
            cols: 1,
            role: "output",
            label: "s",
          });
          const cs = await prepareColumnSum(ctx, { dtype });
          await ctx.scoped(async () => {
            const rec = new Recorder(ctx);
            cs.record(rec, { c, out });
            await rec.finish();
          });
          const got = await download(ctx, out);
          c.destroy();
          out.destroy();
          return got;
        };
        const vec = await sums(base, 40), scalar = await sums(wide, 41);
        assert.deepEqual(vec, scalar.subarray(0, 40), `${dtype} v ${v}`);
      }
    }
  },
});

Deno.test("column_sum: plan keeps chunks ≥ 256 rows, ≤ MAX_CHUNKS per shard, within a binding", () => {
  const p = columnSumPlan([256000], 2304, 2 ** 31 - 4);
  assert.equal(p.chunkRows, 8000);
  assert.equal(p.chunks, 32);
  assert.equal(p.workspaceBytes, 32 * 2304 * 4);
  const q = columnSumPlan([100, 100, 50], 10, 4096);
  assert.deepEqual(q.chunksPerShard, [1, 1, 1]);
  const r = columnSumPlan([1_000_000], 100, 4096); // 32 chunks·100·4 > 4096: bigger chunks
  assert.ok(r.workspaceBytes <= 4096 && r.chunks * r.chunkRows >= 1_000_000);
});

Deno.test({
  name: "weighted column sum: vector weights and the mean over valid rows, sharded input",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 300, d = 37;
    const x = roundArray(randomArray(n * d, 5), "bf16");
    const w = randomArray(n, 6);
    const targets = Int32Array.from(randomArray(n, 7), (u, i) => (u < -0.5 ? IGNORE_INDEX : i));
    let valid = 0;
    for (const t of targets) if (t !== IGNORE_INDEX) valid++;
    const xt = fromHost(ctx, {
      dtype: "bf16",
      rows: n,
      cols: d,
      role: "input",
      label: "x",
      maxRowsPerShard: 70,
    }, x);
    const wt = columnVector(ctx, w, "w");
    const tt = columnVector(ctx, targets, "t");
    const ct = columnVector(ctx, Float32Array.of(valid), "c");
    const out1 = createTensor(ctx, { dtype: "f32", rows: d, cols: 1, role: "output", label: "o" });
    const out2 = createTensor(ctx, { dtype: "f32", rows: d, cols: 1, role: "output", label: "o" });
    const vec = await prepareWeightedColumnSum(ctx, {
      dtype: "bf16",
      weights: "vector",
      ignoreIndex: IGNORE_INDEX,
    });
    const mean = await prepareWeightedColumnSum(ctx, {
      dtype: "bf16",
      weights: "validMean",
      ignoreIndex: IGNORE_INDEX,
    });
    const rec = new Recorder(ctx);
    vec.record(rec, { x: xt, weights: wt, out: out1, scale: -0.25 });
    mean.record(rec, { x: xt, targets: tt, count: ct, out: out2 });
    await rec.finish();
    const g1 = await download(ctx, out1), g2 = await download(ctx, out2);
    for (let k = 0; k < d; k++) {
      let s1 = 0, s2 = 0, a = 0;
      for (let i = 0; i < n; i++) {
        s1 += w[i] * x[i * d + k];
        a += Math.abs(x[i * d + k]);
        if (targets[i] !== IGNORE_INDEX) s2 += x[i * d + k];
      }
      assert(Math.abs(g1[k] + 0.25 * s1) <= 1e-5 * a, `vector col ${k}: ${g1[k]} vs ${-0.25 * s1}`);
      assert(Math.abs(g2[k] - s2 / valid) <= 1e-5 * a / valid, `mean col ${k}`);
    }
  },
});
