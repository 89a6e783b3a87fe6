import assert from "node:assert/strict";
import { download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { prepareScaleByScalar } from "./scale_by_scalar.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "scale_by_scalar: every shard scaled by the first element of a GPU vector",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const host = randomArray(13 * 7, 2);
    const x = fromHost(
      ctx,
      { dtype: "f32", rows: 13, cols: 7, role: "output", label: "x", maxRowsPerShard: 5 },
      host,
    );
    const s = fromHost(
      ctx,
      { dtype: "f32", rows: 3, cols: 1, role: "input", label: "s" },
      Float32Array.of(-1.75, 9, 9),
    );
    const k = await prepareScaleByScalar(ctx);
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      k.record(rec, { x, scalar: s });
      await rec.finish();
    });
    const got = await download(ctx, x);
    host.forEach((h, i) => assert.equal(got[i], Math.fround(-1.75 * h), `element ${i}`));
    x.destroy();
    s.destroy();
  },
});
