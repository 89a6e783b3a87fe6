import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import {
  boxMinEntropy,
  entropyLowerBound,
  minimizeEntropy,
  normalizedEntropyGap,
  randomClassifier,
  twoLevelEntropy,
} from "./entropy_bound.ts";
import { tokenStatsFromLogits } from "./metrics.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `${a} != ${b} (tol ${tol})`);

Deno.test("twoLevelEntropy matches the entropy of the vertex logits", () => {
  for (const [v, k, g] of [[2, 1, 0.3], [5, 2, 1.7], [10, 1, 6], [7, 7, 3], [100, 40, 0]]) {
    const z = Array.from({ length: v }, (_, i) => (i < k ? g : 0));
    close(
      twoLevelEntropy({ vocabSize: v, topCount: k, gap: g }),
      tokenStatsFromLogits(z, 0).entropy,
    );
  }
  // Huge gaps do not overflow.
  close(twoLevelEntropy({ vocabSize: 1000, topCount: 1, gap: 5000 }), 0);
});

Deno.test("boxMinEntropy is the minimum over the box (sampled) and picks the best vertex", () => {
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (const [v, a] of [[3, 0.4], [6, 1.5], [12, 0.2], [12, 3]]) {
    const b = boxMinEntropy({ logitBound: a, vocabSize: v });
    for (let t = 0; t < 2000; t++) {
      const z = Array.from({ length: v }, () => {
        const u = rand();
        return u < 0.3 ? a : u < 0.6 ? -a : (2 * rand() - 1) * a;
      });
      assert.ok(tokenStatsFromLogits(z, 0).entropy >= b.entropy - 1e-12);
    }
    // Every vertex is at least the minimum.
    for (let k = 1; k <= v; k++) {
      assert.ok(twoLevelEntropy({ vocabSize: v, topCount: k, gap: 2 * a }) >= b.entropy - 1e-15);
    }
  }
  // Small bound: the half/half split beats a single confident token; large: one token.
  const k = boxMinEntropy({ logitBound: 0.01, vocabSize: 1000 }).topCount;
  assert.ok(k > 450 && k <= 500, `topCount ${k}`);
  assert.equal(boxMinEntropy({ logitBound: 10, vocabSize: 1000 }).topCount, 1);
});

Deno.test("bound ≤ numerical minimum on random small classifiers", () => {
  const cases: [number, number, number][] = [
    [3, 2, 0.5],
    [5, 2, 1],
    [8, 3, 0.3],
    [10, 4, 2],
    [20, 8, 0.7],
    [16, 16, 1.5],
  ];
  let seed = 1;
  for (const [v, d, rho] of cases) {
    const r = rho * Math.sqrt(d);
    const res = minimizeEntropy({ vocabSize: v, hiddenSize: d, hiddenNorm: r, seed: seed++ });
    const b = entropyLowerBound({ rho, hiddenSize: d, vocabSize: v });
    close(res.bound, b, 1e-12); // unit rows: the result's bound is the theorem's
    assert.ok(b <= res.entropy + 1e-12, `V=${v} D=${d} ρ=${rho}: ${b} > ${res.entropy}`);
    assert.ok(res.entropy <= Math.log(v) + 1e-12);
  }
  // Rows of other norms: the bound scales with the largest row norm.
  const w = randomClassifier({ vocabSize: 6, hiddenSize: 3, seed: 3, rowNorm: 2.5 });
  const res = minimizeEntropy({ weights: w, vocabSize: 6, hiddenSize: 3, hiddenNorm: 1 });
  close(res.logitBound, 2.5, 1e-12);
  assert.ok(res.bound <= res.entropy + 1e-12);
});

Deno.test("bound is attained by the antipodal classifier (tightness)", () => {
  for (const [v, d, rho] of [[4, 2, 1], [9, 3, 2], [30, 5, 1.2]]) {
    const k = boxMinEntropy({ logitBound: rho * Math.sqrt(d), vocabSize: v }).topCount;
    const u = randomClassifier({ vocabSize: 1, hiddenSize: d, seed: 11 });
    const w = new Float64Array(v * d);
    for (let i = 0; i < v; i++) {
      for (let j = 0; j < d; j++) w[i * d + j] = (i < k ? 1 : -1) * u[j];
    }
    const res = minimizeEntropy({
      weights: w,
      vocabSize: v,
      hiddenSize: d,
      hiddenNorm: rho * Math.sqrt(d),
    });
    close(res.entropy, entropyLowerBound({ rho, hiddenSize: d, vocabSize: v }), 1e-10);
  }
});

Deno.test("limits: ρ → 0 gives log|V|, large ρ decreases to 0", () => {
  for (const v of [2, 10, 32000]) {
    close(entropyLowerBound({ rho: 0, hiddenSize: 64, vocabSize: v }), Math.log(v), 1e-12);
    close(entropyLowerBound({ rho: 1e-9, hiddenSize: 64, vocabSize: v }), Math.log(v), 1e-9);
    close(normalizedEntropyGap({ rho: 0, hiddenSize: 64, vocabSize: v }), 0);
  }
  let prev = Infinity;
  for (const rho of [0.01, 0.1, 0.5, 1, 2, 5, 20, 100]) {
    const b = entropyLowerBound({ rho, hiddenSize: 16, vocabSize: 1000 });
    assert.ok(b < prev, `not decreasing at ρ=${rho}`);
    prev = b;
  }
  assert.ok(prev < 1e-10);
  close(normalizedEntropyGap({ rho: 100, hiddenSize: 4096, vocabSize: 128256 }), 1, 1e-12);
});

Deno.test("monotone: decreasing in D, increasing in |V|", () => {
  for (const rho of [0.05, 0.1, 0.3]) {
    let prev = Infinity;
    for (let d = 64; d <= 8192; d *= 2) {
      const b = entropyLowerBound({ rho, hiddenSize: d, vocabSize: 32000 });
      assert.ok(b < prev, `ρ=${rho}: not decreasing at D=${d}`);
      prev = b;
    }
    for (const d of [64, 1024, 4096]) {
      const small = entropyLowerBound({ rho, hiddenSize: d, vocabSize: 32000 });
      const large = entropyLowerBound({ rho, hiddenSize: d, vocabSize: 256000 });
      assert.ok(small < large);
    }
  }
});

Deno.test("invalid parameters throw InputError", () => {
  assert.throws(() => entropyLowerBound({ rho: -1, hiddenSize: 4, vocabSize: 4 }), InputError);
  assert.throws(() => entropyLowerBound({ rho: 1, hiddenSize: 0, vocabSize: 4 }), InputError);
  assert.throws(() => entropyLowerBound({ rho: 1, hiddenSize: 4, vocabSize: 0 }), InputError);
  assert.throws(() => normalizedEntropyGap({ rho: 1, hiddenSize: 4, vocabSize: 1 }), InputError);
  assert.throws(
    () => minimizeEntropy({ weights: [1, 2], vocabSize: 2, hiddenSize: 2, hiddenNorm: 1 }),
    InputError,
  );
});
