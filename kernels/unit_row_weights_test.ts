import assert from "node:assert/strict";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { type Reduction, resolveOptions } from "../core/options.ts";
import { prepareUnitRowWeights } from "./unit_row_weights.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "unit_row_weights: count of non-ignored targets and 1/count, 1 or 0 per row",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 601; // more rows than threads
    const targets = Int32Array.from({ length: n }, (_, i) => i % 7 === 2 ? -100 : i % 50);
    const valid = targets.filter((t) => t !== -100).length;
    for (const reduction of ["mean", "sum", "none"] as Reduction[]) {
      const o = resolveOptions({ reduction });
      const tT = fromHost(
        ctx,
        { dtype: "i32", rows: n, cols: 1, role: "input", label: "targets" },
        targets,
      );
      const w = createTensor(ctx, { dtype: "f32", rows: n, cols: 1, role: "output", label: "w" });
      const count = createTensor(ctx, {
        dtype: "f32",
        rows: 1,
        cols: 1,
        role: "output",
        label: "count",
      });
      const k = await prepareUnitRowWeights(ctx, o);
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        k.record(rec, { targets: tT, w, count });
        await rec.finish();
      });
      assert.equal((await download(ctx, count))[0], valid);
      const got = await download(ctx, w);
      const unit = reduction === "mean" ? Math.fround(1 / valid) : 1;
      targets.forEach((t, i) =>
        assert.equal(got[i], t === -100 ? 0 : unit, `${reduction} w[${i}]`)
      );
      for (const t of [tT, w, count]) t.destroy();
    }
  },
});
