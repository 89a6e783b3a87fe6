import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import type { HostInputs } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { methodByName } from "../methods/mod.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";
import {
  compareCurves,
  normFromPartials,
  prepareSgd,
  SGD_GROUPS,
  splitTokens,
  type StepRecord,
  trainLinearHead,
} from "./training.ts";

/**
 * Tolerance of the training-curve parity, fused vs baseline: at every step the loss and both
 * gradient norms agree within this relative difference. Both compute the same f32 function with
 * different summation orders (≈1e-7 relative per step); the runs start from the same state and
 * see the same batches, so the differences stay near that level over tens of steps.
 */
const CURVE_RTOL = 1e-5;

Deno.test({
  name: "sgd step: x ← x − lr·g over sharded tensors, and ‖g‖ from the partial sums",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const rows = 1037, cols = 3; // 3111 values: ragged against 64 workgroups × 256
    const x0 = randomArray(rows * cols, 1), g0 = randomArray(rows * cols, 2, 3);
    const mk = (label: string, data: Float32Array) =>
      fromHost(ctx, { dtype: "f32", rows, cols, role: "input", label, maxRowsPerShard: 400 }, data);
    const x = mk("x", x0), g = mk("g", g0);
    assert.equal(x.shards.length, 3);
    const sgd = await prepareSgd(ctx);
    const pt = createTensor(ctx, {
      dtype: "f32",
      rows: 6 * SGD_GROUPS,
      cols: 1,
      role: "workspace",
      label: "partials",
    });
    const partials = pt.shards[0].buffer;
    let want = 0;
    for (const v of g0) want += v * v;
    for (const lr of [0.25, 0]) {
      const before = await download(ctx, x);
      const next = await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const s = sgd.record(rec, { x, g, lr, partials, slot: 1 });
        await rec.finish();
        return s;
      });
      assert.equal(next, 4);
      const after = await download(ctx, x);
      for (let i = 0; i < after.length; i++) {
        const w = before[i] - lr * g0[i];
        assert.ok(Math.abs(after[i] - w) <= 1e-6 * (1 + Math.abs(w)), `x[${i}]`);
      }
      const sums = await download(
        ctx,
        { ...pt, dtype: "f32", rows: 6 * SGD_GROUPS, cols: 1 } as never,
      );
      const norm = normFromPartials(sums, 1, 4);
      assert.ok(Math.abs(norm - Math.sqrt(want)) <= 1e-5 * Math.sqrt(want), `norm ${norm}`);
    }
    x.destroy();
    g.destroy();
    pt.destroy();
  },
});

/** The same training loop on the host in float64 with the reference gradients. */
function hostTraining(x: HostInputs, beta: number, steps: number, lr: number, b: number) {
  const e = Float64Array.from(x.e), c = Float64Array.from(x.c);
  const batches = Math.floor(x.n / b);
  const out: StepRecord[] = [];
  for (let step = 0; step < steps; step++) {
    const k = step % batches;
    const eb = e.subarray(k * b * x.d, (k + 1) * b * x.d);
    const tb = x.targets.subarray(k * b, (k + 1) * b);
    const r = lceReference({ n: b, v: x.v, d: x.d, e: eb, c, targets: tb }, { beta });
    const norm = (a: Float64Array) => Math.sqrt(a.reduce((s, v) => s + v * v, 0));
    out.push({ step, loss: r.loss[0], gradNormC: norm(r.dC), gradNormE: norm(r.dE) });
    for (let i = 0; i < c.length; i++) c[i] -= lr * r.dC[i];
    for (let i = 0; i < eb.length; i++) eb[i] -= lr * r.dE[i];
  }
  return { records: out, c, e };
}

Deno.test({
  name: "training: baseline and fused follow the float64 host SGD (batches, E and C trained)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = makeFixture("llm", { n: 50, v: 41, d: 12, seed: 3, ignoreFraction: 0.1 });
    const want = hostTraining(x, 0.1, 7, 0.5, 16);
    for (const name of ["baseline", "fused"]) {
      const got = await trainLinearHead(ctx, {
        method: methodByName(name),
        data: x,
        beta: 0.1,
        steps: 7,
        lr: 0.5,
        batchSize: 16,
        trainE: true,
      });
      const agree = compareCurves(got.records, want.records);
      assert.ok(agree.maxRelLoss <= CURVE_RTOL, `${name}: loss ${JSON.stringify(agree)}`);
      assert.ok(agree.maxRelGradNormC <= CURVE_RTOL, `${name}: ‖dC‖ ${JSON.stringify(agree)}`);
      assert.ok(agree.maxRelGradNormE <= CURVE_RTOL, `${name}: ‖dE‖ ${JSON.stringify(agree)}`);
      assert.equal(got.e.length, 48 * 12); // 3 batches of 16; the remainder is left out
      for (let i = 0; i < got.c.length; i++) {
        assert.ok(Math.abs(got.c[i] - want.c[i]) <= 1e-5, `${name}: C[${i}]`);
      }
      for (let i = 0; i < got.e.length; i++) {
        assert.ok(Math.abs(got.e[i] - want.e[i]) <= 1e-5, `${name}: E[${i}]`);
      }
    }
  },
});

Deno.test({
  name: "training parity: fused and baseline loss curves and gradient norms agree at every step",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = makeFixture("llm", { n: 256, v: 512, d: 64, seed: 1 });
    const run = (name: string) =>
      trainLinearHead(ctx, {
        method: methodByName(name),
        data: x,
        beta: 0.1,
        steps: 20,
        lr: 0.1,
        trainE: true,
      });
    const fused = await run("fused");
    const baseline = await run("baseline");
    const agree = compareCurves(fused.records, baseline.records);
    assert.ok(agree.maxRelLoss <= CURVE_RTOL, `loss: ${JSON.stringify(agree)}`);
    assert.ok(agree.maxRelGradNormC <= CURVE_RTOL, `‖dC‖: ${JSON.stringify(agree)}`);
    assert.ok(agree.maxRelGradNormE <= CURVE_RTOL, `‖dE‖: ${JSON.stringify(agree)}`);
    const l = fused.records.map((r) => r.loss);
    assert.ok(l[19] < l[0], `the loss goes down: ${l[0]} → ${l[19]}`);
  },
});

Deno.test("compareCurves, splitTokens and option checks", async () => {
  const r = (loss: number, c: number, e: number, step = 0) => ({
    step,
    loss,
    gradNormC: c,
    gradNormE: e,
  });
  const a = compareCurves([r(1, 2, 3), r(2.5, 2, 0, 1)], [r(1, 2, 3), r(2, 1, 0, 1)]);
  assert.deepEqual(a, {
    maxRelLoss: 0.25,
    maxRelGradNormC: 1,
    maxRelGradNormE: 0,
    worstLossStep: 1,
  });
  assert.throws(() => compareCurves([r(1, 1, 1)], []), InputError);
  const x = makeFixture("llm", { n: 10, v: 7, d: 3 });
  const s = splitTokens(x, 4);
  assert.equal(s.train.n, 6);
  assert.equal(s.heldOut.n, 4);
  assert.deepEqual(Array.from(s.heldOut.targets), Array.from(x.targets.slice(6)));
  assert.deepEqual(Array.from(s.heldOut.e), Array.from(x.e.slice(18)));
  assert.deepEqual(Array.from(s.train.c), Array.from(x.c));
  assert.throws(() => splitTokens(x, 10), InputError);
  assert.throws(() => splitTokens(x, 0), InputError);
  const ctx = await testContext();
  const base = { method: methodByName("baseline"), data: x, beta: 0.1, steps: 1, lr: 0.1 };
  await assert.rejects(() => trainLinearHead(ctx, { ...base, steps: 0 }), InputError);
  await assert.rejects(() => trainLinearHead(ctx, { ...base, lr: 0 }), InputError);
  await assert.rejects(() => trainLinearHead(ctx, { ...base, batchSize: 11 }), InputError);
  await assert.rejects(() => trainLinearHead(ctx, { ...base, beta: 2 }), InputError);
});
