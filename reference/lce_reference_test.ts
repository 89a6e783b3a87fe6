import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { IGNORE_INDEX, type LceOptions, type Reduction } from "../core/options.ts";
import { Rng } from "../fixtures/rng.ts";
import { assertClose } from "./compare.ts";
import { lceLossOnly, lceReference, type ReferenceInputs } from "./lce_reference.ts";

/** Random float64 inputs with logits of order 1–3 (so a softcap of 1.5 bends them). */
function randomInputs(n: number, v: number, d: number, targets: number[], seed = 1) {
  const rng = new Rng(seed);
  return { n, v, d, e: rng.normals(n * d, 0.9), c: rng.normals(v * d, 0.9), targets };
}

/** The scalar objective whose gradient the oracle returns: g·loss, or Σ g_n·loss_n for none. */
function objective(x: ReferenceInputs, o: Partial<LceOptions>, g: number | number[]): number {
  const loss = lceLossOnly(x, o);
  if (typeof g === "number") return loss.reduce((a, b) => a + g * b, 0);
  return loss.reduce((a, b, i) => a + g[i] * b, 0);
}

/** Central finite differences of `objective` with respect to every entry of E, then C. */
function finiteDifferences(x: ReferenceInputs, o: Partial<LceOptions>, g: number | number[]) {
  const h = 1e-5;
  const grads = [];
  for (const key of ["e", "c"] as const) {
    const a = Float64Array.from(x[key]);
    const out = new Float64Array(a.length);
    for (let i = 0; i < a.length; i++) {
      const a0 = a[i];
      a[i] = a0 + h;
      const fp = objective({ ...x, [key]: a }, o, g);
      a[i] = a0 - h;
      const fm = objective({ ...x, [key]: a }, o, g);
      a[i] = a0;
      out[i] = (fp - fm) / (2 * h);
    }
    grads.push(out);
  }
  return { dE: grads[0], dC: grads[1] };
}

const TARGETS = [2, IGNORE_INDEX, 4, 0];

for (const beta of [0, 0.1, 1]) {
  for (const softcap of [undefined, 1.5]) {
    for (const reduction of ["mean", "sum", "none"] as Reduction[]) {
      const name =
        `gradients match finite differences: β=${beta}, softcap=${softcap}, ${reduction}`;
      Deno.test(name, () => {
        const x = randomInputs(4, 5, 3, TARGETS, 7);
        const o = { beta, softcap, reduction };
        const grads: (number | number[])[] = reduction === "none"
          ? [1, [0.3, -1.2, 2.0, -0.7]]
          : [1, 0.7, -2.5];
        for (const g of grads) {
          const r = lceReference(x, o, g);
          const fd = finiteDifferences(x, o, g);
          const tol = { atol: 2e-8, rtol: 1e-6 };
          assertClose(r.dE, fd.dE, { ...tol, name: `dE (g=${g})`, cols: x.d });
          assertClose(r.dC, fd.dC, { ...tol, name: `dC (g=${g})`, cols: x.d });
          // The ignored row 1 gets no gradient.
          assert.deepEqual([...r.dE.subarray(3, 6)], [0, 0, 0]);
        }
      });
    }
  }
}

Deno.test("finite-difference check would catch a dropped β/v term", () => {
  // Guard against a vacuous check: with a non-zero column mean of C the β/v term is large.
  const x = randomInputs(3, 5, 4, [1, 2, 3], 3);
  for (let i = 0; i < x.c.length; i++) x.c[i] += 2;
  const r = lceReference(x, { beta: 0.5, reduction: "sum" });
  const fd = finiteDifferences(x, { beta: 0.5, reduction: "sum" }, 1);
  // dE_n without the term would be G'·C with G' = p − (1−β)[t]; the difference is (β/v)·Σ_v C_v.
  const colSum = new Float64Array(x.d);
  for (let j = 0; j < x.v; j++) for (let k = 0; k < x.d; k++) colSum[k] += x.c[j * x.d + k];
  const wrong = Float64Array.from(r.dE, (g, i) => g + (0.5 / x.v) * colSum[i % x.d]);
  assert.throws(() => assertClose(wrong, fd.dE, { atol: 1e-6, rtol: 1e-4 }));
  assertClose(r.dE, fd.dE, { atol: 2e-8, rtol: 1e-6 });
});

Deno.test("all-zero E: loss log v, uniform softmax, closed-form gradients", () => {
  const n = 3, v = 6, d = 4;
  const rng = new Rng(11);
  const c = rng.normals(v * d);
  const targets = [5, 0, 2];
  for (const beta of [0, 0.3]) {
    for (const softcap of [undefined, 3]) {
      const x = { n, v, d, e: new Float64Array(n * d), c, targets };
      const r = lceReference(x, { beta, softcap, reduction: "none" }, [1, 2, -1]);
      for (let i = 0; i < n; i++) {
        assert.ok(Math.abs(r.loss[i] - Math.log(v)) < 1e-14);
        assert.ok(Math.abs(r.perToken.lse[i] - Math.log(v)) < 1e-14);
        assert.ok(Math.abs(r.perToken.entropy[i] - Math.log(v)) < 1e-14);
        assert.equal(r.perToken.maxLogit[i], 0);
        assert.equal(r.perToken.argmax[i], 0);
        assert.equal(r.perToken.logitSum[i], 0);
        assert.equal(r.perToken.targetLogit[i], 0);
      }
      // G_nv = w_n(1−β)(1/v − [v=t_n]) (softcap factor 1 at z=0), so
      // dE_n = w_n(1−β)(mean_v C_v − C_{t_n}) and dC = Gᵀ·0 = 0.
      const w = [1, 2, -1];
      const want = new Float64Array(n * d);
      for (let i = 0; i < n; i++) {
        for (let k = 0; k < d; k++) {
          let mean = 0;
          for (let j = 0; j < v; j++) mean += c[j * d + k] / v;
          want[i * d + k] = w[i] * (1 - beta) * (mean - c[targets[i] * d + k]);
        }
      }
      assertClose(r.dE, want, { atol: 1e-15, rtol: 1e-13, name: "dE", cols: d });
      assert.ok(r.dC.every((g) => g === 0));
    }
  }
});

Deno.test("β = 1: loss = LSE − mean z, independent of the target", () => {
  const x = randomInputs(3, 7, 5, [0, 3, 6], 5);
  const r = lceReference(x, { beta: 1, reduction: "none" });
  const swapped = lceReference({ ...x, targets: [6, 0, 1] }, { beta: 1, reduction: "none" });
  for (let i = 0; i < x.n; i++) {
    // Naive logits, independently of the oracle's row loop.
    const z: number[] = [];
    for (let j = 0; j < x.v; j++) {
      let s = 0;
      for (let k = 0; k < x.d; k++) s += x.e[i * x.d + k] * x.c[j * x.d + k];
      z.push(s);
    }
    const lse = Math.log(z.reduce((a, b) => a + Math.exp(b), 0));
    const want = lse - z.reduce((a, b) => a + b, 0) / x.v;
    assert.ok(Math.abs(r.loss[i] - want) < 1e-12, `row ${i}: ${r.loss[i]} vs ${want}`);
    assert.ok(Math.abs(swapped.loss[i] - want) < 1e-12);
    assert.ok(Math.abs(r.perToken.lse[i] - lse) < 1e-12);
    assert.equal(r.perToken.targetLogit[i], z[x.targets[i]]);
  }
});

Deno.test("single row by hand: z = (1, −1), target 0", () => {
  const x = { n: 1, v: 2, d: 1, e: [1], c: [1, -1], targets: [0] };
  const p1 = 1 / (1 + Math.exp(2)); // 0.11920292202211755
  const r = lceReference(x, { reduction: "sum" });
  assert.ok(Math.abs(r.loss[0] - 0.12692801104297263) < 1e-15); // log(1 + e⁻²)
  assert.ok(Math.abs(r.dE[0] - -2 * p1) < 1e-15); // (p0 − 1)·1 + p1·(−1)
  assert.ok(Math.abs(r.dC[0] - -p1) < 1e-15);
  assert.ok(Math.abs(r.dC[1] - p1) < 1e-15);
  assert.equal(r.perToken.argmax[0], 0);
  assert.equal(r.perToken.maxLogit[0], 1);
  assert.equal(r.perToken.logitSum[0], 0);
  const h = -(1 - p1) * Math.log(1 - p1) - p1 * Math.log(p1);
  assert.ok(Math.abs(r.perToken.entropy[0] - h) < 1e-15);
  // β = 0.5: loss = LSE − 0.5·z_t − (0.5/2)·Σz = log(e + e⁻¹) − 0.5.
  const rb = lceReference(x, { beta: 0.5, reduction: "mean" });
  assert.ok(Math.abs(rb.loss[0] - (Math.log(Math.E + 1 / Math.E) - 0.5)) < 1e-15);
  // G = (p0 − 0.5 − 0.25, p1 − 0.25) = (0.25 − p1, p1 − 0.25), and dC_v = G_v·E = G_v.
  assert.ok(Math.abs(rb.dC[0] - (0.25 - p1)) < 1e-15);
  assert.ok(Math.abs(rb.dC[1] - (p1 - 0.25)) < 1e-15);
});

Deno.test("single row by hand with softcap 2: z = ±2·tanh(1/2)", () => {
  const x = { n: 1, v: 2, d: 1, e: [1], c: [1, -1], targets: [0] };
  const r = lceReference(x, { softcap: 2, reduction: "sum" });
  assert.ok(Math.abs(r.perToken.maxLogit[0] - 0.9242343145200195) < 1e-15);
  assert.ok(Math.abs(r.loss[0] - 0.14624362058504553) < 1e-15);
  // G = (p0 − 1, p1)·(1 − tanh²(1/2)) = (−0.1069984…, 0.1069984…).
  assert.ok(Math.abs(r.dC[0] - -0.106998414376458) < 1e-15);
  assert.ok(Math.abs(r.dC[1] - 0.106998414376458) < 1e-15);
  assert.ok(Math.abs(r.dE[0] - -2 * 0.106998414376458) < 1e-15);
});

Deno.test("mean with ignored rows = mean over the kept rows (as PyTorch), not sum/n", () => {
  const x = randomInputs(4, 5, 3, TARGETS, 9);
  const none = lceReference(x, { reduction: "none" });
  const sum = lceReference(x, { reduction: "sum" });
  const mean = lceReference(x, { reduction: "mean" });
  assert.equal(none.loss[1], 0);
  assert.equal(mean.count, 3);
  const kept = none.loss[0] + none.loss[2] + none.loss[3];
  assert.ok(Math.abs(sum.loss[0] - kept) < 1e-14);
  assert.ok(Math.abs(mean.loss[0] - kept / 3) < 1e-14);
  assert.ok(Math.abs(mean.loss[0] - kept / 4) > 1e-3);
  // Dropping the ignored row changes nothing (PyTorch semantics), gradients included.
  const keep = [0, 2, 3];
  const dropped = {
    n: 3,
    v: x.v,
    d: x.d,
    e: keep.flatMap((i) => [...x.e.subarray(i * x.d, (i + 1) * x.d)]),
    c: x.c,
    targets: keep.map((i) => TARGETS[i]),
  };
  const m2 = lceReference(dropped, { reduction: "mean" });
  assert.ok(Math.abs(m2.loss[0] - mean.loss[0]) < 1e-14);
  assertClose(m2.dC, mean.dC, { atol: 1e-15, rtol: 1e-12, name: "dC" });
  // The ignored row's statistics are still computed.
  const unignored = lceReference({ ...x, targets: [2, 1, 4, 0] }, { reduction: "none" });
  assert.equal(none.perToken.lse[1], unignored.perToken.lse[1]);
  assert.equal(none.perToken.entropy[1], unignored.perToken.entropy[1]);
  assert.equal(none.perToken.targetLogit[1], 0);
  assert.notEqual(unignored.loss[1], 0);
});

Deno.test("huge logits stay finite (max-subtracted)", () => {
  // z = (1000, 998): loss = log(1 + e⁻²) for target 0.
  const x = { n: 1, v: 2, d: 2, e: [10, 10], c: [50, 50, 49.9, 49.9], targets: [0] };
  const r = lceReference(x, { reduction: "mean" });
  assert.ok(Math.abs(r.loss[0] - 0.12692801104297263) < 1e-12);
  assert.ok(Math.abs(r.perToken.lse[0] - (1000 + 0.12692801104297263)) < 1e-12);
  assert.ok(r.dE.every(Number.isFinite) && r.dC.every(Number.isFinite));
});

Deno.test("sum with every row ignored is 0 with zero gradients", () => {
  const x = randomInputs(2, 3, 2, [IGNORE_INDEX, IGNORE_INDEX]);
  const r = lceReference(x, { reduction: "sum" });
  assert.equal(r.loss[0], 0);
  assert.equal(r.count, 0);
  assert.ok(r.dE.every((g) => g === 0) && r.dC.every((g) => g === 0));
});

Deno.test("validation: options, inputs and gradOutput throw InputError", () => {
  const x = randomInputs(2, 3, 2, [0, 1]);
  assert.throws(() => lceReference(x, { beta: 1.5 }), InputError);
  assert.throws(() => lceReference(x, { softcap: 0 }), InputError);
  assert.throws(() => lceReference({ ...x, targets: [0, 3] }, {}), /outside \[0, 3\)/);
  assert.throws(() => lceReference({ ...x, targets: [-100, -100] }, {}), /mean loss is undefined/);
  assert.throws(() => lceReference({ ...x, e: [1, 2, 3] }, {}), InputError);
  assert.throws(() => lceReference(x, { reduction: "mean" }, [1, 2]), /must be a scalar/);
  assert.throws(() => lceReference(x, { reduction: "none" }, [1, 2, 3]), /expected n = 2/);
  assert.throws(() => lceReference(x, { reduction: "sum" }, NaN), /must be finite/);
  // A one-element array is a scalar.
  const a = lceReference(x, { reduction: "sum" }, [2]);
  const b = lceReference(x, { reduction: "sum" }, 2);
  assert.deepEqual(a.dE, b.dE);
});

Deno.test("Float32Array HostInputs give the same result as their float64 copy", () => {
  const x = randomInputs(3, 4, 5, [0, 1, 2]);
  const e32 = Float32Array.from(x.e), c32 = Float32Array.from(x.c);
  const r32 = lceReference({ ...x, e: e32, c: c32, targets: Int32Array.from(x.targets) }, {});
  const r64 = lceReference({ ...x, e: Float64Array.from(e32), c: Float64Array.from(c32) }, {});
  assert.deepEqual(r32, r64);
});
