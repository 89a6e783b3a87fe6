import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { assertDenseDecision, assertDensePath } from "../../testing/fused_backward.ts";
import { DENSE_DE_ABOVE } from "./dense_de.ts";

Deno.test({
  name: "dense dE: both dE paths forced, against float64, at odd shapes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await assertDensePath(ctx, {
      path: "denseDE",
      // |V| odd and not a multiple of the 64-row chunks; n not a multiple of the tiles
      cases: [
        { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true },
        { dtype: "bf16", beta: 1, softcap: 4, d: 34, gradDtype: "input", sort: false },
        { dtype: "f32", beta: 0.1, softcap: 5, d: 33, gradDtype: "f32", sort: true },
        { dtype: "bf16", beta: 0, d: 33, gradDtype: "f32", sort: false },
        // little free storage: 24 chunks of 64 rows, more than one gated pass holds
        { dtype: "bf16", beta: 0.1, d: 8, gradDtype: "input", sort: false, v: 1500 },
      ],
      seed: 90,
      // the dense path's output rounding and the kept tiles'
      keptRoundings: () => 2,
      check({ cs, tag, dense }) {
        if (cs.v === 1500) assert.equal(dense.bwd.lastDenseDEChunkRows, 64, `${tag}: chunk rows`);
      },
    });
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
