import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { prepareTranspose } from "./transpose.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "transpose: odd shapes, either side sharded, every element of a poisoned output written",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const k = await prepareTranspose(ctx);
    for (const [r, c, srcShard, dstShard] of [[37, 70, 37, 70], [45, 33, 7, 10], [1, 65, 1, 4]]) {
      const host = randomArray(r * c, r + c);
      const src = fromHost(
        ctx,
        { dtype: "f32", rows: r, cols: c, role: "input", label: "x", maxRowsPerShard: srcShard },
        host,
      );
      const dst = fromHost(
        ctx,
        { dtype: "f32", rows: c, cols: r, role: "output", label: "y", maxRowsPerShard: dstShard },
        new Float32Array(r * c).fill(Number.NaN),
      );
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        k.record(rec, { src, dst });
        await rec.finish();
      });
      const got = await download(ctx, dst);
      for (let i = 0; i < r; i++) {
        for (let j = 0; j < c; j++) {
          assert.equal(got[j * r + i], host[i * c + j], `${r}×${c}: element (${i}, ${j})`);
        }
      }
      src.destroy();
      dst.destroy();
    }
    const a = createTensor(ctx, { dtype: "f32", rows: 3, cols: 4, role: "input", label: "a" });
    const b = createTensor(ctx, { dtype: "f32", rows: 3, cols: 4, role: "output", label: "b" });
    assert.throws(() => k.record(new Recorder(ctx), { src: a, dst: b }), /not an f32 transpose/);
    a.destroy();
    b.destroy();
  },
});
