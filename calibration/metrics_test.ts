import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import {
  binIndex,
  calibrationMetrics,
  tokenStatsFromLogitRows,
  tokenStatsFromLogits,
} from "./metrics.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `${a} != ${b} (tol ${tol})`);

Deno.test("perfect calibration gives ECE = RMSCE = 0", () => {
  // Bin (0.6, 0.8] with M = 5: confidence 0.75 on 4 tokens, 3 correct.
  // Bin (0.2, 0.4]: confidence 0.25 on 4 tokens, 1 correct.
  const confidence = [0.75, 0.75, 0.75, 0.75, 0.25, 0.25, 0.25, 0.25];
  const correct = [1, 1, 1, 0, 1, 0, 0, 0];
  const r = calibrationMetrics({ confidence, correct }, { bins: 5 });
  close(r.ece, 0);
  close(r.rmsce, 0);
  close(r.accuracy, 0.5);
  close(r.meanConfidence, 0.5);
  assert.equal(r.perBin.length, 5);
  assert.equal(r.perBin[3].count, 4);
  close(r.perBin[3].accuracy, 0.75);
  assert.ok(Number.isNaN(r.perBin[0].accuracy));
  assert.ok(Number.isNaN(r.meanEntropy));
});

Deno.test("confident and wrong: ECE = RMSCE = mean confidence", () => {
  const r = calibrationMetrics({
    confidence: [0.99, 0.95, 1.0, 0.97],
    correct: [false, false, false, false],
    entropy: [0.1, 0.2, 0, 0.3],
  });
  close(r.ece, (0.99 + 0.95 + 1.0 + 0.97) / 4);
  // All four fall in the last of 15 bins: RMSCE = |gap| of that bin.
  close(r.rmsce, r.ece);
  assert.equal(r.perBin[14].count, 4);
  close(r.accuracy, 0);
  close(r.meanEntropy, 0.15);
});

Deno.test("two bins with opposite gaps: ECE and RMSCE by hand", () => {
  // M = 2. Bin 0 (0, 0.5]: conf 0.4 ×2, both correct → gap +0.6.
  // Bin 1 (0.5, 1]: conf 0.9 ×6, 3 correct → gap −0.4.
  const confidence = [0.4, 0.4, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9];
  const correct = [1, 1, 1, 1, 1, 0, 0, 0];
  const r = calibrationMetrics({ confidence, correct }, { bins: 2 });
  close(r.ece, (2 / 8) * 0.6 + (6 / 8) * 0.4);
  close(r.rmsce, Math.sqrt((2 / 8) * 0.36 + (6 / 8) * 0.16));
});

Deno.test("bin boundaries: edges go to the lower bin, 0 to the first, 1 to the last", () => {
  assert.equal(binIndex(0, 15), 0);
  assert.equal(binIndex(1, 15), 14);
  assert.equal(binIndex(1e-300, 15), 0);
  for (const m of [2, 5, 10, 15, 20]) {
    for (let k = 1; k < m; k++) {
      const edge = k / m;
      assert.equal(binIndex(edge, m), k - 1, `edge ${k}/${m}`);
      assert.equal(binIndex(edge + 1e-12, m), k, `just above ${k}/${m}`);
    }
  }
  // 0.7·10 = 7.000000000000001 in floating point: still bin 6 = (0.6, 0.7].
  assert.equal(binIndex(0.7, 10), 6);
  const r = calibrationMetrics({ confidence: [0, 0.5, 1], correct: [0, 1, 1] }, { bins: 2 });
  assert.deepEqual(r.perBin.map((b) => b.count), [2, 1]);
});

Deno.test("bad input throws InputError", () => {
  assert.throws(() => calibrationMetrics({ confidence: [], correct: [] }), InputError);
  assert.throws(() => calibrationMetrics({ confidence: [0.5], correct: [1, 0] }), InputError);
  assert.throws(() => calibrationMetrics({ confidence: [1.5], correct: [1] }), InputError);
  assert.throws(() => calibrationMetrics({ confidence: [NaN], correct: [1] }), InputError);
  assert.throws(
    () => calibrationMetrics({ confidence: [0.5], correct: [1] }, { bins: 0 }),
    InputError,
  );
});

Deno.test("tokenStatsFromLogits: uniform, two-way and a hand case", () => {
  const u = tokenStatsFromLogits([3, 3, 3, 3], 2);
  close(u.confidence, 0.25);
  close(u.entropy, Math.log(4));
  assert.equal(u.correct, false); // argmax is the first maximum, index 0
  assert.equal(tokenStatsFromLogits([3, 3, 3, 3], 0).correct, true);

  // z = (log 3, 0): p = (3/4, 1/4).
  const t = tokenStatsFromLogits([Math.log(3), 0], 0);
  close(t.confidence, 0.75);
  close(t.entropy, -(0.75 * Math.log(0.75) + 0.25 * Math.log(0.25)));
  assert.equal(t.correct, true);

  // Shift invariance and large logits.
  const big = tokenStatsFromLogits([1000 + Math.log(3), 1000], 1);
  close(big.confidence, 0.75);
  close(big.entropy, t.entropy, 1e-12);
  assert.equal(big.correct, false);
});

Deno.test("tokenStatsFromLogits: masked -Infinity logits and invalid input", () => {
  const s = tokenStatsFromLogits([0, -Infinity, 0], 2);
  close(s.confidence, 0.5);
  close(s.entropy, Math.log(2));
  const peaked = tokenStatsFromLogits([800, 0, 0], 0);
  close(peaked.confidence, 1);
  close(peaked.entropy, 0);
  assert.throws(() => tokenStatsFromLogits([0, NaN], 0), InputError);
  assert.throws(() => tokenStatsFromLogits([0, Infinity], 0), InputError);
  assert.throws(() => tokenStatsFromLogits([0, 1], 2), InputError);
  assert.throws(() => tokenStatsFromLogits([-Infinity, -Infinity], 0), InputError);
});

Deno.test("tokenStatsFromLogitRows skips ignored rows", () => {
  const logits = new Float32Array([0, 0, 0, 5, 0, 0, 1, 2, 3]);
  const out = tokenStatsFromLogitRows(logits, 3, [0, -100, 2]);
  assert.equal(out.confidence.length, 2);
  assert.deepEqual([...out.correct], [1, 1]);
  close(out.entropy[0], Math.log(3));
  const r = calibrationMetrics(out);
  close(r.accuracy, 1);
  assert.throws(() => tokenStatsFromLogitRows(logits, 4, [0, 1]), InputError);
});
