/**
 * The tensor-core rows' memory estimates (PreparedMethod.estimateBytes) against what their calls
 * allocate, as measure/estimate_test.ts holds every runnable row to; on their emulated kernels
 * (kernels/tc/tc_codegen.ts), under Deno's WebGPU only (see methods/fused_tc_test.ts).
 */
import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { resolveOptions } from "../core/options.ts";
import { uploadGradOut } from "../methods/run.ts";
import { baselineTcMethod } from "../methods/baseline_tc.ts";
import { fusedTcMethod } from "../methods/fused_tc.ts";
import { ESTIMATE_SLACK_BYTES } from "../methods/_common.ts";
import { makeDeviceInputs } from "./inputs.ts";
import { measureMethod, MODES } from "./measure.ts";

const ctx0 = await testContext();
const EMULATE = { ...GPU_TEST, ignore: ctx0.engine !== "deno" };
const fusedTc = (tileMap: boolean) =>
  fusedTcMethod({
    name: "x",
    label: "x",
    description: "x",
    sort: !tileMap,
    tileMap,
    mode: "emulated",
  });

Deno.test({
  name: "tensor-core rows (emulated): the estimates bound the measured peaks, closely",
  ...EMULATE,
  async fn() {
    const spec = { n: 70, v: 257, d: 40, dtype: "bf16" as const };
    const opts = resolveOptions({ beta: 0.1 });
    const x = await makeDeviceInputs(ctx0, { fixture: "cce", ...spec, seed: 3 });
    const gradOut = uploadGradOut(ctx0, spec.n, opts);
    try {
      const base = baselineTcMethod({ name: "baseline-tc-emulated", mode: "emulated" });
      for (const m of [base, fusedTc(false), fusedTc(true)]) {
        const rows = await measureMethod(ctx0, m, {
          spec,
          opts,
          inputs: x.inputs,
          gradOut,
          modes: MODES,
          warmup: 0,
          reps: 1,
        });
        for (const r of rows) {
          const what = `${m.name} ${r.mode}`;
          assert.equal(r.error, undefined, what);
          assert.ok(
            r.peakBytes! <= r.estimateBytes!,
            `${what}: ${r.peakBytes} > ${r.estimateBytes}`,
          );
          const slack = 2 * ESTIMATE_SLACK_BYTES + 0.25 * r.peakBytes!;
          assert.ok(r.estimateBytes! - r.peakBytes! <= slack, `${what}: ${r.estimateBytes}`);
        }
      }
    } finally {
      gradOut.destroy();
      x.destroy();
    }
  },
});
