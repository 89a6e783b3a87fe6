import assert from "node:assert/strict";
import { compiled } from "./compiled.ts";
import { assertParity, type ParityCase, standardCases } from "../testing/parity.ts";
import { roundedLogitsTolerance } from "../testing/rounded_logits_tol.ts";
import { bufferBytes, methodPeaks } from "../testing/method_peaks.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { GpuContext } from "../gpu/context.ts";
import { type Dtype, resolveOptions } from "../core/options.ts";

// Logits and their gradient are stored in the input dtype, so 16-bit cases get the tolerance of
// testing/rounded_logits_tol.ts: the f32 tolerance plus a first-order bound of what rounding the
// logits and G to nearest even (relative error ≤ 2⁻⁸ bf16, 2⁻¹¹ f16) changes in loss, dE and dC,
// evaluated on each case's data (a few % of the arrays' scale for bf16). f32 keeps the default.
const _parity = (ctx: GpuContext, c: ParityCase) =>
  assertParity(ctx, compiled, { ...c, tol: roundedLogitsTolerance(c) });

Deno.test({
  name: "compiled: parity at odd shapes, every β, reduction, dtype, softcap",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const c of standardCases(ctx)) await _parity(ctx, c);
    for (const dtype of ["f32", "bf16"] as Dtype[]) {
      await _parity(ctx, {
        n: 70,
        v: 257,
        d: 33,
        dtype,
        beta: 0.1,
        softcap: 3,
        ignoreFraction: 0.2,
        seed: 21,
      });
    }
    await _parity(ctx, { n: 1, v: 1, d: 1, dtype: "f32", beta: 0.5, seed: 12 });
    // The 16-bit rows really are rounded: the f32 tolerance does not hold for them.
    await assert.rejects(
      assertParity(ctx, compiled, { n: 37, v: 131, d: 29, dtype: "bf16", beta: 0.1, seed: 3 }),
    );
  },
});

Deno.test({
  name: "compiled: sharded logits and gradient (small bindings)",
  ...GPU_TEST,
  async fn() {
    // 2048-byte bindings: 6 rows of bf16 logits (v = 131) per shard, 3 of f32.
    const ctx = await GpuContext.create({ poison: true, maxBindingBytes: 2048 });
    for (const dtype of ["bf16", "f32"] as Dtype[]) {
      await _parity(ctx, {
        n: 37,
        v: 131,
        d: 29,
        dtype,
        beta: 0.1,
        softcap: 3,
        reduction: dtype === "f32" ? "none" : "mean",
        gradOutput: dtype === "f32" ? "vector" : 0.6,
        ignoreFraction: 0.2,
        seed: 8,
      });
    }
    ctx.destroy();
  },
});

Deno.test({
  name:
    "compiled: memory — n×|V| logits in the input dtype, then an n×|V| gradient in it (and dEᵀ)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const n = 64, v = 512, d = 32;
    for (const dtype of ["bf16", "f32"] as Dtype[]) {
      const b = dtype === "f32" ? 4 : 2;
      const opts = resolveOptions({ beta: 0.1 });
      const got = await methodPeaks(ctx, compiled, { n, v, d, dtype, beta: 0.1 }, opts);
      const vec = bufferBytes(n, 4), scalar = bufferBytes(1, 4);
      // forward: logits in the input dtype, LSE, loss rows, count, loss
      assert.equal(got.fwd, bufferBytes(n * v, b) + 2 * vec + 2 * scalar, `${dtype} forward`);
      // backward: row weights, the gradient of the logits in the input dtype, dE, dC, and with a
      // 16-bit gradient the d×n f32 scratch dE is formed in transposed
      const dET = dtype === "f32" ? 0 : bufferBytes(d * n, 4);
      const bwd = vec + bufferBytes(n * v, b) + bufferBytes(n * d, 4) + bufferBytes(v * d, 4) + dET;
      assert.equal(got.bwd, bwd, `${dtype} backward`);
      assert.ok(got.fwdParams + got.bwdParams < 16 * 1024, "uniform blocks stay small");
    }
  },
});
