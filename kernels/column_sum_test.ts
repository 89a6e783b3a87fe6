import assert from "node:assert/strict";
import { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { roundArray } from "../core/dtype.ts";
import type { Dtype } from "../core/options.ts";
import { columnSumPlan, MAX_CHUNKS, prepareColumnSum } from "./column_sum.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

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
