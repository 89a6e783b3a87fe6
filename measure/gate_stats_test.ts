import assert from "node:assert/strict";
import { GATE_THRESHOLDS } from "./gate_suites.ts";
import { binomialTail, judgeParity, judgeTime, signTestCount } from "./gate_stats.ts";
import { median } from "./timing.ts";

import { Rng } from "../fixtures/rng.ts";

Deno.test("gate: binomial tail and sign-test counts", () => {
  assert.equal(binomialTail(0, 7), 1);
  assert.equal(binomialTail(7, 7), 1 / 128);
  assert.equal(binomialTail(6, 7), 8 / 128);
  assert.equal(binomialTail(8, 7), 0);
  assert.ok(Math.abs(binomialTail(8, 9) - 10 / 512) < 1e-15);
  assert.equal(signTestCount(7, 0.05), 7); // 6 of 7: p = 0.0625
  assert.equal(signTestCount(8, 0.05), 7);
  assert.equal(signTestCount(9, 0.05), 8);
  assert.equal(signTestCount(5, 0.05), 5);
  assert.equal(signTestCount(4, 0.05), 5); // no count is significant with 4 rounds
});

/**
 * Simulated per-round ratios: true ratio × lognormal noise (σ = 0.15 in log, about the spread of
 * CPU-time ratios measured on lavapipe while other test processes load the two cores), and one
 * round in ten hit by a ×2 outlier.
 */
function _rounds(trueRatio: number, n: number, seed: number): number[] {
  const z = new Rng(seed).normals(n);
  const hit = new Rng(seed, 1);
  return [...z].map((x) => trueRatio * Math.exp(0.15 * x) * (hit.uniform() < 0.1 ? 2 : 1));
}

Deno.test("gate: the time verdict never flags unchanged code and catches 2× and 3×", () => {
  // A slowdown fails only when a second measurement shows it too (runGate re-runs the method):
  // with one ×2 outlier in ten rounds, 4 of 7 outliers (p ≈ 2.6e-3) can fake one measurement.
  const trials = 2000;
  let single = 0, falseAlarms = 0, caught2 = 0, caught3 = 0, worstQ = 0;
  const fails = (ratio: number, base: number, seed: number) =>
    judgeTime(_rounds(ratio, 7, seed), base).regressed &&
    judgeTime(_rounds(ratio, 7, seed + 1e6), base).regressed;
  for (let t = 0; t < trials; t++) {
    const base = median(_rounds(4, 14, 3 * t + 1)); // --update: twice the rounds
    const same = judgeTime(_rounds(4, 7, 3 * t + 2), base);
    worstQ = Math.max(worstQ, same.q);
    if (same.regressed) single++;
    if (fails(4, base, 3 * t + 2)) falseAlarms++;
    if (fails(8, base, 3 * t + 3)) caught2++;
    if (fails(12, base, 3 * t + 3)) caught3++;
  }
  assert.equal(falseAlarms, 0, `worst median q ${worstQ}`);
  assert.ok(single <= 0.005 * trials, `one measurement alone flagged ${single}/${trials}`);
  assert.ok(caught2 >= 0.99 * trials, `2× caught ${caught2}/${trials}`);
  assert.equal(caught3, trials);
});

Deno.test("gate: time needs the median, the significance and a material change", () => {
  // a burst of three slow rounds out of seven: median high? no — and not significant
  assert.equal(judgeTime([1, 1, 1, 5, 5, 5, 1], 1).regressed, false);
  // median 2×, but one round of seven faster than the baseline: p = 0.0625 > 0.05
  const six = judgeTime([2, 2, 2, 2, 2, 2, 0.9], 1);
  assert.deepEqual([six.exceed, six.rounds, six.regressed], [6, 7, false]);
  assert.ok(Math.abs(six.p - 0.0625) < 1e-12);
  const all = judgeTime([2, 2.1, 1.9, 2, 2.2, 1.8, 2], 1);
  assert.equal(all.regressed, true);
  assert.ok(all.q > 1.9 && all.q < 2.1);
  // a tiny mode (0.05 yardsticks) doubling moves by less than timeMinDelta: not gated
  assert.equal(judgeTime([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], 0.05).regressed, false);
  // faster
  const fast = judgeTime([0.4, 0.5, 0.45, 0.5, 0.4, 0.5, 0.45], 1);
  assert.deepEqual([fast.regressed, fast.improved], [false, true]);
  // no baseline ratio: nothing to judge
  assert.equal(judgeTime([1, 2], 0).regressed, false);
});

Deno.test("gate: parity allowance is min(limit, growth × baseline + floor)", () => {
  const th = GATE_THRESHOLDS;
  assert.equal(judgeParity(1e-6, 1e-6).regressed, false);
  assert.equal(judgeParity(1e-5, 1e-6).regressed, false); // 1.5e-6 + 1e-5
  assert.equal(judgeParity(2e-5, 1e-6).regressed, true);
  assert.equal(judgeParity(0.02, 0.017).regressed, false);
  assert.equal(judgeParity(0.03, 0.017).regressed, true);
  assert.equal(judgeParity(0.049, undefined).regressed, false); // new: only the limit
  assert.equal(judgeParity(0.06, 0.05).allowed, th.parityMaxErr);
  assert.equal(judgeParity(NaN, 1e-6).regressed, true);
  assert.equal(judgeParity(Infinity, undefined).regressed, true);
});
