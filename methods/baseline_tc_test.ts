/**
 * `baseline-tc`: unsupported where the adapter offers no f16 subgroup matrices, with the reason;
 * built on the emulated kernels (see methods/fused_tc_test.ts for why under Deno's WebGPU only),
 * parity with float64 at odd shapes, with the logits and G over several bindings, and bitwise
 * determinism.
 */
import assert from "node:assert/strict";
import { baselineTc, baselineTcMethod } from "./baseline_tc.ts";
import { runMethod } from "./run.ts";
import { assertParity, caseInputs } from "../testing/parity.ts";
import { caseOptions } from "../testing/rounded_logits_tol.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { resolveOptions } from "../core/options.ts";

const ctx0 = await testContext();
const EMULATE = { ...GPU_TEST, ignore: ctx0.engine !== "deno" };
const emulated = baselineTcMethod({ name: "baseline-tc-emulated", mode: "emulated" });

Deno.test("baseline-tc: unsupported here with the reason", GPU_TEST, () => {
  const spec = { n: 8, v: 16, d: 8, dtype: "f16" as const };
  assert.match(
    baselineTc.unsupported!(ctx0, spec, resolveOptions({})) ?? "",
    /Dawn|subgroup-matrix/,
  );
  assert.equal(baselineTc.label, "Baseline (tensor cores)");
});

Deno.test({
  name: "baseline-tc (emulated): parity at odd shapes, β, softcap, reductions; deterministic",
  ...EMULATE,
  async fn() {
    const c1 = {
      n: 37,
      v: 131,
      d: 29,
      dtype: "bf16",
      beta: 0.1,
      ignoreFraction: 0.2,
      seed: 1,
    } as const;
    const a = await assertParity(ctx0, emulated, c1);
    await assertParity(ctx0, emulated, {
      n: 70,
      v: 300,
      d: 48,
      dtype: "f16",
      beta: 1,
      softcap: 20,
      reduction: "none",
      gradOutput: "vector",
      ignoreFraction: 0.2,
      seed: 2,
    });
    const b = await runMethod(ctx0, emulated, caseInputs(c1), caseOptions(c1), {
      dtype: "bf16",
      gradOutput: 1.7,
    });
    for (const k of ["loss", "dE", "dC"] as const) assert.deepEqual(b[k], a[k], k);
  },
});

Deno.test({
  name: "baseline-tc (emulated): logits, G and gradients over several bindings",
  ...EMULATE,
  async fn() {
    const sharded = await GpuContext.create({ poison: true, maxBindingBytes: 4096 });
    try {
      await assertParity(sharded, emulated, {
        n: 50,
        v: 140,
        d: 40,
        dtype: "bf16",
        beta: 0,
        reduction: "sum",
        ignoreFraction: 0.2,
        seed: 3,
      });
    } finally {
      sharded.destroy();
    }
  },
});
