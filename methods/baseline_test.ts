import { baseline } from "./baseline.ts";
import { assertParity } from "../testing/parity.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import type { Dtype, Reduction } from "../core/options.ts";

Deno.test({
  name: "baseline: parity with float64 at odd shapes, every β, reduction, dtype, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const dtypes: Dtype[] = ctx.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
    let i = 0;
    for (const dtype of dtypes) {
      for (const beta of [0, 0.1, 1]) {
        const reduction: Reduction = (["mean", "sum", "none"] as const)[i++ % 3];
        await assertParity(ctx, baseline, {
          n: 37,
          v: 131,
          d: 29,
          dtype,
          beta,
          reduction,
          ignoreFraction: 0.2,
          gradOutput: reduction === "none" ? "vector" : 1.7,
          seed: i,
        });
      }
    }
    await assertParity(ctx, baseline, {
      n: 19,
      v: 67,
      d: 13,
      dtype: "bf16",
      beta: 0.1,
      softcap: 3,
      ignoreFraction: 0.3,
      seed: 11,
    });
    await assertParity(ctx, baseline, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
  },
});
