import assert from "node:assert/strict";
import { createTensor, type DeviceTensor, download, fromHost, upload } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { roundArray } from "../core/dtype.ts";
import { type Dtype, type LceOptions, resolveOptions } from "../core/options.ts";
import { prepareChunkGrad, prepareChunkStats, rowPrefix } from "./chunk_rows.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** Float64 LSE, loss and gradient of one row of logits (as the kernels define them). */
function _hostRow(z: ArrayLike<number>, t: number, w: number, o: LceOptions) {
  const v = z.length, s = o.softcap;
  const zc = Array.from(z, (x) => s === undefined ? x : s * Math.tanh(x / s));
  const max = Math.max(...zc);
  const lse = max + Math.log(zc.reduce((a, x) => a + Math.exp(x - max), 0));
  const sum = zc.reduce((a, x) => a + x, 0);
  const loss = t === o.ignoreIndex ? 0 : lse - (1 - o.beta) * zc[t] - (o.beta / v) * sum;
  const g = zc.map((x, j) =>
    w * (Math.exp(x - lse) - (j === t ? 1 - o.beta : 0) - o.beta / v) *
    (s === undefined ? 1 : 1 - (x / s) ** 2)
  );
  return { lse, loss, g };
}

const _close = (got: number, want: number, what: string) =>
  assert.ok(Math.abs(got - want) <= 2e-5 * (1 + Math.abs(want)), `${what}: ${got} vs ${want}`);

Deno.test({
  name: "chunk_rows: stats and logit gradient of token chunks at row offsets, prefix views",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 23, v = 37, chunk = 8;
    const o = resolveOptions({ beta: 0.1, softcap: 2 });
    const targets = Int32Array.from(
      randomArray(n, 4),
      (u, i) => i % 5 === 3 ? o.ignoreIndex : Math.floor(((u + 1) / 2) * v),
    );
    const wHost = randomArray(n, 5, 2);
    for (const dtype of ["f32", "bf16"] as Dtype[]) {
      const inPlace = dtype === "f32";
      const zHost = roundArray(randomArray(n * v, 6, 3), dtype);
      const vec = (label: string, data?: Float32Array | Int32Array) => {
        const t = createTensor(ctx, {
          dtype: data instanceof Int32Array ? "i32" : "f32",
          rows: n,
          cols: 1,
          role: "workspace",
          label,
        });
        if (data) upload(ctx, t, data);
        return t;
      };
      const tT = vec("targets", targets), lse = vec("lse"), lossRows = vec("loss rows");
      const w = vec("w", wHost);
      const stats = await prepareChunkStats(ctx, { logitsDtype: dtype, opts: o, v });
      const grad = await prepareChunkGrad(ctx, { logitsDtype: dtype, opts: o, v, inPlace });
      // One buffer of `chunk` rows per chunk, the last one seen through a 7-row prefix.
      const mk = (dt: Dtype, label: string) =>
        createTensor(ctx, {
          dtype: dt,
          rows: chunk,
          cols: v,
          role: "workspace",
          label,
          maxRowsPerShard: 2,
        });
      const owned: DeviceTensor[] = [];
      const chunks: { lo: number; z: DeviceTensor; g: DeviceTensor }[] = [];
      for (let lo = 0; lo < n; lo += chunk) {
        const rows = Math.min(chunk, n - lo);
        const zBuf = mk(dtype, "z"), gBuf = inPlace ? zBuf : mk("f32", "g");
        owned.push(zBuf, gBuf);
        const z = rowPrefix(zBuf, rows), g = rowPrefix(gBuf, rows);
        upload(ctx, z, zHost.subarray(lo * v, (lo + rows) * v));
        chunks.push({ lo, z, g });
      }
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        for (const c of chunks) {
          const common = { logits: c.z, rowOffset: c.lo, targets: tT };
          stats.record(rec, { ...common, lse, lossRows });
          grad.record(rec, { ...common, lse, w, grad: c.g });
        }
        await rec.finish();
      });
      const gotLse = await download(ctx, lse), gotLoss = await download(ctx, lossRows);
      for (const c of chunks) {
        const g = await download(ctx, c.g);
        for (let r = 0; r < c.z.rows; r++) {
          const row = c.lo + r;
          const want = _hostRow(
            zHost.subarray(row * v, (row + 1) * v),
            targets[row],
            wHost[row],
            o,
          );
          _close(gotLse[row], want.lse, `${dtype} lse[${row}]`);
          _close(gotLoss[row], want.loss, `${dtype} loss[${row}]`);
          for (let j = 0; j < v; j++) _close(g[r * v + j], want.g[j], `${dtype} G[${row}][${j}]`);
        }
      }
      for (const t of [...owned, tT, lse, lossRows, w]) t.destroy();
    }
  },
});

Deno.test({
  name: "chunk_rows: rowPrefix cuts shards and refuses bad sizes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const t = fromHost(
      ctx,
      { dtype: "bf16", rows: 9, cols: 3, role: "input", label: "t", maxRowsPerShard: 4 },
      randomArray(27, 1),
    );
    const p = rowPrefix(t, 5);
    assert.deepEqual(p.shards.map((s) => [s.rowStart, s.rows]), [[0, 4], [4, 1]]);
    assert.equal(rowPrefix(t, 9), t);
    assert.throws(() => rowPrefix(t, 10), RangeError);
    t.destroy();
  },
});
