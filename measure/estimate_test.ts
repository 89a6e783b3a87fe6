import assert from "node:assert/strict";
import { GPU_TEST } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { type LceOptions, resolveOptions } from "../core/options.ts";
import { METHODS } from "../methods/mod.ts";
import { uploadGradOut } from "../methods/run.ts";
import { ESTIMATE_SLACK_BYTES } from "../methods/_common.ts";
import type { ProblemSpec } from "../methods/types.ts";
import { makeDeviceInputs } from "./inputs.ts";
import { measureMethod, MODES } from "./measure.ts";

/**
 * Every method's estimate against what its calls allocate: never below the measured peak (a run
 * refuses a cell by it and caps the cell at the free memory), and not above it by more than the
 * slack the formulas add, so an estimate that grows wrong is caught too. Odd shapes, 16-bit and
 * f32, β > 0 and β = 0, reduction none, and a binding limit small enough that every tensor is
 * sharded.
 */
async function _check(ctx: GpuContext, spec: ProblemSpec, opts: LceOptions, label: string) {
  const x = await makeDeviceInputs(ctx, { fixture: "cce", ...spec, seed: 3 });
  const gradOut = uploadGradOut(ctx, spec.n, opts);
  try {
    for (const method of METHODS) {
      const rows = await measureMethod(ctx, method, {
        spec,
        opts,
        inputs: x.inputs,
        gradOut,
        modes: MODES,
        warmup: 0,
        reps: 1,
      });
      for (const r of rows) {
        const what = `${label}: ${method.name} ${r.mode}`;
        if (r.error?.startsWith("unsupported:")) continue;
        assert.equal(r.error, undefined, what);
        assert.ok(r.estimateBytes !== undefined, `${what}: no estimate`);
        assert.ok(
          r.peakBytes! <= r.estimateBytes!,
          `${what}: peak ${r.peakBytes} > estimate ${r.estimateBytes}`,
        );
        const slack = 2 * ESTIMATE_SLACK_BYTES + 0.25 * r.peakBytes!;
        assert.ok(
          r.estimateBytes! - r.peakBytes! <= slack,
          `${what}: estimate ${r.estimateBytes} is ${
            r.estimateBytes! - r.peakBytes!
          } bytes above the peak ${r.peakBytes}`,
        );
      }
    }
  } finally {
    gradOut.destroy();
    x.destroy();
  }
}

Deno.test({
  name: "estimates: every method's estimate bounds its peak, closely, in every mode",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ poison: true });
    try {
      await _check(
        ctx,
        { n: 70, v: 257, d: 33, dtype: "bf16" },
        resolveOptions({ beta: 0.1 }),
        "bf16",
      );
      await _check(ctx, { n: 48, v: 300, d: 16, dtype: "f32" }, resolveOptions({ beta: 0 }), "f32");
      await _check(
        ctx,
        { n: 40, v: 129, d: 24, dtype: "bf16" },
        resolveOptions({ beta: 0.1, reduction: "none" }),
        "none",
      );
    } finally {
      ctx.destroy();
    }
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await _check(
        sharded,
        { n: 96, v: 300, d: 16, dtype: "bf16" },
        resolveOptions({ beta: 0.1 }),
        "sharded",
      );
    } finally {
      sharded.destroy();
    }
  },
});
