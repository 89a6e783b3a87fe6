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
    // |V| past four workgroup widths: the row statistics' unrolled loop and its remainder, the
    // target in either part
    for (const [v, seed] of [[2061, 13], [1031, 14]]) {
      await assertParity(ctx, baseline, {
        n: 9,
        v,
        d: 11,
        dtype: "bf16",
        beta: 0.1,
        softcap: 6,
        ignoreFraction: 0.2,
        seed,
      });
    }
  },
});
