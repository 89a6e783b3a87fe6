import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuError } from "../core/errors.ts";
import { methodByName } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import {
  cellWeight,
  planWeight,
  runSweep,
  type SweepCell,
  type SweepPlan,
  sweepShape,
} from "./sweep.ts";

/** The baseline, except that it runs out of memory when |V| = `failAt`. */
function _failingAt(failAt: number): LceMethod {
  const b = methodByName("baseline");
  return {
    ...b,
    name: "flaky",
    label: "Flaky",
    prepare: (ctx, spec, opts) =>
      spec.v === failAt
        ? Promise.reject(new GpuError("out-of-memory", `no room at v = ${spec.v}`))
        : b.prepare(ctx, spec, opts),
  };
}

Deno.test({
  name: "runSweep: a method failing at one size leaves error cells there and the sweep finishes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const plan: SweepPlan = {
      over: "v",
      values: [24, 40, 56],
      base: { n: 8, v: 24, d: 8, dtype: "f32" },
      betas: [0.1],
      methods: [methodByName("fused"), _failingAt(40)],
      modes: ["fwd", "fwd+bwd"],
      fixture: "cce",
      seed: 1,
      reduction: "mean",
      reps: 2,
      warmup: 0,
    };
    const seen: SweepCell[] = [];
    const live = ctx.memory().liveBytes;
    const { cells } = await runSweep(ctx, plan, { onCell: (c) => seen.push(c) });
    assert.equal(cells.length, 3 * 2 * 2, "every value × method × mode");
    assert.deepEqual(seen, cells, "each cell reported as it came");
    for (const c of cells) {
      assert.equal(c.shape.v, c.x);
      const failed = c.row.method === "flaky" && c.x === 40;
      assert.equal(c.row.error !== undefined, failed, `${c.row.method} v=${c.x}: ${c.row.error}`);
      if (failed) assert.match(c.row.error!, /OOM/);
      else {
        assert.equal(c.row.timeMsSamples?.length, 2);
        assert.ok(c.row.peakBytes! > 0);
      }
    }
    // the larger size after the failure was measured: the sweep went on
    assert.ok(cells.some((c) => c.row.method === "flaky" && c.x === 56 && !c.row.error));
    assert.equal(ctx.memory().liveBytes, live, "inputs of every size freed");
    ctx.destroy();
  },
});

Deno.test("sweep plan: shapes per value and weights for the time estimate", () => {
  const plan = {
    over: "n" as const,
    values: [2, 4],
    base: { n: 1, v: 10, d: 3, dtype: "bf16" as const },
    betas: [0.1, 0],
    methods: [methodByName("fused")],
    modes: ["fwd" as const, "bwd" as const],
    fixture: "cce",
    seed: 0,
    reduction: "mean" as const,
    reps: 1,
    warmup: 0,
  };
  assert.deepEqual(sweepShape(plan, 4), { n: 4, v: 10, d: 3, dtype: "bf16" });
  assert.equal(cellWeight(sweepShape(plan, 2), "bwd"), 2 * 10 * 3 * 2);
  // 2 β × 1 method × Σ over n ∈ {2, 4} of n·v·d × (1 + 2)
  assert.equal(planWeight(plan), 2 * (2 * 30 * 3 + 4 * 30 * 3));
});
