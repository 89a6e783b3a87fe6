import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { caseInputs } from "../testing/parity.ts";
import type { GpuContext } from "../gpu/context.ts";
import { fromHost } from "../gpu/tensor.ts";
import { type Dtype, type LceOptions, resolveOptions } from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { uploadInputs } from "../methods/run.ts";
import {
  CHECK_TOL,
  chooseSamples,
  CorrectnessCheck,
  describeCheck,
  gradientRoundingTol,
  normwiseError,
} from "./check.ts";

Deno.test("check: samples are distinct, valid, stratified, and hold the most frequent targets", () => {
  const targets = Int32Array.from({ length: 200 }, (_, i) => (i % 5 === 0 ? -100 : (i * 7) % 50));
  targets[3] = targets[4] = targets[6] = 42; // 42 becomes the most frequent target
  const s = chooseSamples(targets, 50, -100, { tokens: 10, vocab: 8 });
  assert.equal(s.tokens.length, 10);
  assert.equal(new Set(s.tokens).size, 10);
  for (const t of s.tokens) assert.notEqual(targets[t], -100);
  assert.equal(s.vocab.length, 8);
  assert.equal(new Set(s.vocab).size, 8);
  assert.equal(s.vocab[0], 42);
  assert.deepEqual(chooseSamples(targets, 50, -100, { tokens: 10, vocab: 8 }), s, "seeded");
  // more wanted than exist: all of them
  const few = chooseSamples(Int32Array.of(1, -100, 0), 3, -100, { tokens: 10, vocab: 10 });
  assert.deepEqual([...few.tokens].sort(), [0, 2]);
  assert.deepEqual([...few.vocab].sort(), [0, 1, 2]);
});

Deno.test("check: the error is relative to the scale; zeros and NaN are errors, not small", () => {
  assert.equal(normwiseError([1, 2], [1, 2]), 0);
  assert.equal(normwiseError([0, 0], [0, 0]), 0);
  assert.equal(normwiseError([0, 0], [1e-30, -2e-30]), 1, "all-zero output: error 1");
  assert.equal(normwiseError([1e-30, 0], [0, 0]), Infinity);
  assert.equal(normwiseError([NaN, 1], [1, 1]), Infinity);
  assert.ok(Math.abs(normwiseError([1.01, 2.02], [1, 2]) - 0.01) < 1e-12);
  assert.equal(gradientRoundingTol({ gradDtype: "bf16", dCRoundings: 5 }, "dC"), 5 * 2 ** -8);
  assert.equal(gradientRoundingTol({ gradDtype: "bf16" }, "dE"), 2 ** -8);
  assert.equal(gradientRoundingTol({ gradDtype: "bf16", dCRoundings: 5 }, "loss"), 0);
  assert.equal(gradientRoundingTol({ gradDtype: "f32" }, "dC"), 0);
  assert.equal(gradientRoundingTol(null, "dC"), 0);
});

/** Outputs as a method would return them, from float64 values changed by `change`. */
function _outputs(
  ctx: GpuContext,
  x: ReturnType<typeof caseInputs>,
  o: LceOptions,
  dtype: Dtype,
  change: { dE?: number; dC?: number; loss?: number } = {},
) {
  const r = lceReference(x, o, 1);
  const t = (a: Float64Array, rows: number, cols: number, k = 1, dt: Dtype = "f32") =>
    fromHost(
      ctx,
      { dtype: dt, rows, cols, role: "output", label: "out" },
      Float32Array.from(a, (y) => y * k),
    );
  return {
    loss: t(r.loss, r.loss.length, 1, change.loss ?? 1),
    dE: t(r.dE, x.n, x.d, change.dE ?? 1, dtype),
    dC: t(r.dC, x.v, x.d, change.dC ?? 1, dtype),
  };
}

Deno.test({
  name: "check: exact outputs pass; 1% off fails at f32, all-zero dC fails at bf16, wrong shape",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const dtype of ["f32", "bf16"] as const) {
      const x = caseInputs({
        n: 37,
        v: 131,
        d: 29,
        dtype,
        beta: 0.1,
        seed: 9,
        ignoreFraction: 0.2,
      });
      const inputs = uploadInputs(ctx, x, dtype);
      const check = await CorrectnessCheck.prepare(ctx, inputs, {
        dtype,
        ignoreIndex: -100,
        gradOut: [1],
        tokens: 8,
        vocab: 8,
      });
      assert.ok(check.referenceMs > 0);
      assert.equal(check.samples.tokens.length, 8);
      for (const beta of [0.1, 0]) {
        const o = resolveOptions({ beta });
        const good = _outputs(ctx, x, o, "f32");
        const c = await check.check(ctx, o, good);
        assert.ok(c.ok, `${dtype} β=${beta}: ${describeCheck(c)}`);
        assert.ok(c.error < 1e-5, `${dtype}: exact outputs err ${c.error}`);
        assert.deepEqual(Object.keys(c.errors).sort(), ["dC", "dE", "loss"]);
        assert.match(describeCheck(c), /^err /);
        // only what a mode produced is compared
        const fwd = await check.check(ctx, o, { loss: good.loss });
        assert.deepEqual(Object.keys(fwd.errors), ["loss"]);
        for (const t of Object.values(good)) t.destroy();
      }
      const o = resolveOptions({ beta: 0.1 });
      const scaled = _outputs(ctx, x, o, "f32", { dE: 1.01 });
      const c1 = await check.check(ctx, o, scaled);
      assert.ok(Math.abs(c1.errors.dE! - 0.01) < 1e-4, `dE scaled by 1.01: err ${c1.errors.dE}`);
      assert.equal(c1.ok, dtype === "bf16", `1% is past f32's tolerance, within bf16's`);
      const zeros = _outputs(ctx, x, o, "f32", { dC: 0 });
      const c2 = await check.check(ctx, o, zeros);
      assert.equal(c2.ok, false);
      assert.equal(c2.worst, "dC");
      assert.equal(c2.error, 1);
      assert.match(describeCheck(c2), /^incorrect: dC err 1\.0 > tol (1\.0e-3|0\.031)$/);
      const wrong = _outputs(ctx, x, resolveOptions({ beta: 0.1, reduction: "none" }), "f32");
      const c3 = await check.check(ctx, o, wrong);
      assert.equal(c3.ok, false);
      assert.match(c3.note ?? "", /loss is 37×1, expected 1×1/);
      // a 16-bit gradient output is allowed its roundings
      const c4 = await check.check(ctx, o, _outputs(ctx, x, o, "bf16"), {
        gradDtype: "bf16",
        dCRoundings: 3,
      });
      assert.ok(c4.ok, describeCheck(c4));
      assert.equal(c4.tol.dC, CHECK_TOL[dtype] + 3 * 2 ** -8);
      for (const t of [scaled, zeros, wrong]) for (const y of Object.values(t)) y.destroy();
      for (const t of Object.values(inputs)) t.destroy();
    }
  },
});
