import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertDenseDecision,
  assertGrads,
  assertRounded16,
  type GradCase,
  gradCaseOptions,
  maxAbs,
  runBackward,
  UNIT_ROUNDOFF,
} from "../../testing/fused_backward.ts";
import { assertClose } from "../../reference/compare.ts";
import { DENSE_DE_ABOVE } from "./dense_de.ts";

Deno.test({
  name: "dense dE: both dE paths forced, against float64, at odd shapes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // |V| odd and not a multiple of the 64-row chunks; n not a multiple of the tiles
    const cases: (GradCase & { v?: number })[] = [
      { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true },
      { dtype: "bf16", beta: 1, softcap: 4, d: 34, gradDtype: "input", sort: false },
      { dtype: "f32", beta: 0.1, softcap: 5, d: 33, gradDtype: "f32", sort: true },
      { dtype: "bf16", beta: 0, d: 33, gradDtype: "f32", sort: false },
      // little free storage: 24 chunks of 64 rows, more than one gated pass holds
      { dtype: "bf16", beta: 0.1, d: 8, gradDtype: "input", sort: false, v: 1500 },
    ];
    for (const [i, cs] of cases.entries()) {
      const { o, b: base } = gradCaseOptions(cs);
      const x = caseInputs({
        n: 70,
        v: cs.v ?? 1031,
        d: cs.d,
        dtype: cs.dtype,
        beta: cs.beta,
        ignoreFraction: 0.2,
        seed: 90 + i,
      });
      const dense = await runBackward(ctx, x, o, cs.dtype, { ...base, denseDE: "always" });
      const kept = await runBackward(ctx, x, o, cs.dtype, { ...base, denseDE: "never" });
      const tag = JSON.stringify(cs);
      assert.equal(dense.got.stats.denseDE, 1, `${tag}: the dense path taken`);
      if (cs.v === 1500) assert.equal(dense.bwd.lastDenseDEChunkRows, 64, `${tag}: chunk rows`);
      assert.equal(kept.got.stats.denseDE, undefined, `${tag}: no dense path recorded`);
      assert.deepEqual(dense.again.dE, dense.got.dE, `${tag}: dense dE bitwise reproducible`);
      // dC does not depend on the dE path
      assert.deepEqual(dense.got.dC, kept.got.dC, `${tag}: dC the same on both paths`);
      if (cs.gradDtype === "f32") {
        assertGrads(`${tag} dense`, dense.got, dense.ref, x.d);
        assertGrads(`${tag} kept tiles`, kept.got, kept.ref, x.d);
      } else {
        // one rounding of each dE element to the 16-bit output
        assertRounded16(`${tag} dense dE`, dense.got.dE, dense.ref.dE, {
          roundings: 1,
          cols: x.d,
        });
      }
      // the dense path is the unfiltered dE: the kept tiles' differs from it by the filter's
      // dropped terms at most (each below ε·|w|·Σ|C|) and the roundings
      const s = maxAbs(dense.ref.dE);
      assertClose(kept.got.dE, dense.got.dE, {
        atol: (cs.gradDtype === "f32" ? 4e-5 : 2 * UNIT_ROUNDOFF.bf16) * s,
        rtol: 0,
        name: `${tag} kept against dense dE`,
        cols: x.d,
      });
    }
  },
});

Deno.test({
  name:
    "dense dE: the decision takes the dense path where most tiles are kept, else the kept tiles",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await assertDenseDecision(ctx, { path: "denseDE", above: DENSE_DE_ABOVE, seeds: [5, 6] });
  },
});
