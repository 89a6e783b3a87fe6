import assert from "node:assert/strict";
import { resolveOptions } from "../core/options.ts";
import { GpuContext } from "../gpu/context.ts";
import { ENGINES } from "../gpu/engine.ts";
import { assertParity, type ParityCase } from "../testing/parity.ts";
import { roundedLogitsTolerance } from "../testing/rounded_logits_tol.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { tcSupport } from "../kernels/tc/tc_tiles.ts";
import { METHODS } from "./mod.ts";

/** Rows that store their logits in the input dtype: their parity tolerance counts that rounding. */
const ROUNDED_LOGITS = new Set(["chunked", "compiled"]);

/**
 * Both engines in one process (whichever LCE_WEBGPU names runs the test context, the other opens
 * beside it): every method's loss and gradients against float64 at one odd shape with β, a
 * softcap, ignored rows and an upstream gradient ≠ 1, on poisoned buffers; and the two engines'
 * losses within the parity tolerance of each other. The full parity sweep runs on each engine
 * through LCE_WEBGPU (CI runs the suite once per engine).
 */
Deno.test({
  name: "engines: every method gives the float64 loss and gradients on Deno's wgpu and on Dawn",
  ...GPU_TEST,
  async fn() {
    const shared = await testContext();
    const other = await GpuContext.create({
      engine: ENGINES.find((e) => e !== shared.engine)!,
      poison: true,
    });
    try {
      const c: ParityCase = {
        n: 23,
        v: 97,
        d: 19,
        dtype: "bf16",
        beta: 0.1,
        softcap: 15,
        ignoreFraction: 0.2,
        gradOutput: 0.7,
        seed: 29,
      };
      let compared = 0;
      for (const method of METHODS) {
        const losses: number[] = [];
        const tol = ROUNDED_LOGITS.has(method.name) ? roundedLogitsTolerance(c) : undefined;
        for (const ctx of [shared, other]) {
          const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
          const why = method.unsupported?.(ctx, spec, resolveOptions(c));
          if (why !== undefined) {
            // only the tensor-core rows may stand aside, and only where the engine or adapter
            // has no subgroup matrices
            assert.equal(why, tcSupport(ctx).reason, `${method.name} on ${ctx.engine}: ${why}`);
            continue;
          }
          const r = await assertParity(ctx, method, { ...c, tol });
          losses.push(r.loss[0]);
        }
        if (losses.length < 2) continue;
        compared++;
        assert.ok(
          Math.abs(losses[0] - losses[1]) <= 2e-4 * Math.abs(losses[0]) + 1e-5,
          `${method.name}: loss ${losses[0]} on ${shared.engine}, ${losses[1]} on ${other.engine}`,
        );
      }
      // every row without tensor cores ran on both engines
      assert.ok(compared >= METHODS.filter((m) => !m.name.endsWith("-tc")).length, `${compared}`);
    } finally {
      other.destroy();
    }
  },
});
