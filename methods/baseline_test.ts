import { baseline } from "./baseline.ts";
import { assertParity, standardCases } from "../testing/parity.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

Deno.test({
  name: "baseline: parity with float64 at odd shapes, every β, reduction, dtype, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const c of standardCases(ctx)) await assertParity(ctx, baseline, c);
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
