import assert from "node:assert/strict";
import type { Dtype, HostInputs } from "../core/options.ts";
import { InputError } from "../core/errors.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { logitRow, widen } from "../reference/logit_row.ts";
import { caseInputs } from "../testing/parity.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";
import { TILE_LARGE } from "../kernels/gemm_codegen.ts";
import { binIndex, calibrationMetrics, tokenStatsFromLogitRows } from "./metrics.ts";
import { streamingCalibration, tokenStatsFromFused } from "./streaming.ts";

/**
 * Tolerances of the GPU statistics against float64 (inputs are rounded to the dtype first, so
 * only f32 arithmetic differs): per-token confidence within CONF_ATOL, entropy within
 * ENTROPY_ATOL·max(1, |LSE|) + 2e-4·H. The argmax must be equal except on near-ties: where the
 * GPU picks another index, its float64 logit must lie within TIE_ATOL·max(1, |max z|) of the max
 * (f32 logits cannot order closer values reliably); exact ties resolve to the first index on both
 * sides. ECE: moving one token's confidence by δ changes ECE by ≤ δ/N, flipping its correctness
 * by ≤ 1/N, moving it to another bin by ≤ 2/N, so |ΔECE| ≤ max δ + (flips + 2·moves)/N, and when
 * nothing flips or moves |ΔECE| ≤ ECE_ATOL.
 */
const CONF_ATOL = 5e-6;
const ENTROPY_ATOL = 2e-6;
const TIE_ATOL = 1e-5;
const ECE_ATOL = 1e-6;

interface Case {
  name: string;
  x: HostInputs;
  dtype: Dtype;
  beta: number;
  softcap?: number;
  vocabSplits?: number;
  tile?: typeof TILE_LARGE;
}

/** Runs the streaming calibration and compares it with the float64 statistics of the full logits. */
async function checkParity(c: Case): Promise<{ flips: number; moves: number; ece: number }> {
  const ctx = await testContext();
  const { x } = c;
  const got = await streamingCalibration(ctx, x, {
    dtype: c.dtype,
    beta: c.beta,
    softcap: c.softcap,
    vocabSplits: c.vocabSplits,
    tile: c.tile,
  });
  // float64 reference from the full n×v logits
  const wide = widen(x);
  const logits = new Float64Array(x.n * x.v);
  const row = new Float64Array(x.v);
  for (let i = 0; i < x.n; i++) logits.set(logitRow(wide, i, row, c.softcap), i * x.v);
  const want = tokenStatsFromLogitRows(logits, x.v, x.targets);
  const ref = lceReference(x, { beta: c.beta, softcap: c.softcap, reduction: "none" });
  const wantReport = calibrationMetrics(want);
  const t = got.tokens;
  assert.equal(t.confidence.length, want.confidence.length, `${c.name}: kept tokens`);
  let flips = 0, moves = 0, maxDc = 0, lossSum = 0;
  for (let k = 0; k < t.rows.length; k++) {
    const i = t.rows[k];
    lossSum += ref.loss[i];
    const dc = Math.abs(t.confidence[k] - want.confidence[k]);
    maxDc = Math.max(maxDc, dc);
    assert.ok(
      dc <= CONF_ATOL,
      `${c.name}: token ${i} confidence ${t.confidence[k]} vs ${want.confidence[k]}`,
    );
    const scale = Math.max(1, Math.abs(ref.perToken.lse[i]));
    const dh = Math.abs(t.entropy[k] - want.entropy[k]);
    assert.ok(
      dh <= ENTROPY_ATOL * scale + 2e-4 * want.entropy[k],
      `${c.name}: token ${i} entropy ${t.entropy[k]} vs ${want.entropy[k]}`,
    );
    const a = t.argmax[k], b = ref.perToken.argmax[i];
    if (a !== b) {
      const zmax = logits[i * x.v + b], za = logits[i * x.v + a];
      assert.ok(
        zmax - za <= TIE_ATOL * Math.max(1, Math.abs(zmax)),
        `${c.name}: token ${i} argmax ${a} (z ${za}) vs ${b} (z ${zmax}): not a near-tie`,
      );
    }
    if (t.correct[k] !== want.correct[k]) flips++;
    if (binIndex(t.confidence[k], 15) !== binIndex(want.confidence[k], 15)) moves++;
  }
  const n = t.rows.length;
  const dEce = Math.abs(got.report.ece - wantReport.ece);
  assert.ok(
    dEce <= maxDc + (flips + 2 * moves) / n + 1e-12,
    `${c.name}: ECE ${got.report.ece} vs ${wantReport.ece} (${flips} flips, ${moves} moves)`,
  );
  if (flips === 0 && moves === 0) {
    assert.ok(dEce <= ECE_ATOL, `${c.name}: ECE ${got.report.ece} vs ${wantReport.ece}`);
    assert.ok(Math.abs(got.report.rmsce - wantReport.rmsce) <= 10 * ECE_ATOL, `${c.name}: RMSCE`);
    assert.equal(got.report.accuracy, wantReport.accuracy);
  }
  assert.ok(Math.abs(got.report.meanEntropy - wantReport.meanEntropy) <= 1e-5, `${c.name}: H`);
  assert.ok(
    Math.abs(t.meanLoss - lossSum / n) <= 1e-5 * Math.max(1, lossSum / n),
    `${c.name}: loss`,
  );
  return { flips, moves, ece: got.report.ece };
}

Deno.test({
  name: "streaming calibration: llm fixture at odd shapes matches float64 of the full logits",
  ...GPU_TEST,
  async fn() {
    const a = await checkParity({
      name: "llm f32",
      x: makeFixture("llm", { n: 333, v: 517, d: 45, seed: 3, ignoreFraction: 0.1 }),
      dtype: "f32",
      beta: 0.1,
    });
    // the llm fixture is over-confident: the metric has something to measure
    assert.ok(a.ece > 0.05, `llm ECE ${a.ece}`);
    await checkParity({
      name: "llm bf16 softcap",
      x: makeFixture("llm", { n: 130, v: 1031, d: 64, dtype: "bf16", seed: 4 }),
      dtype: "bf16",
      beta: 0.1,
      softcap: 30,
      vocabSplits: 5,
    });
    await checkParity({
      name: "llm f16 large tile",
      x: makeFixture("llm", { n: 70, v: 257, d: 33, dtype: "f16", seed: 5, ignoreFraction: 0.2 }),
      dtype: "f16",
      beta: 0,
      tile: TILE_LARGE,
    });
  },
});

Deno.test({
  name: "streaming calibration: flat random logits, ignored rows, several splits",
  ...GPU_TEST,
  async fn() {
    for (const [n, v, d, splits] of [[77, 131, 29, 3], [1, 1, 1, 1], [5, 3, 2, 1]]) {
      await checkParity({
        name: `random ${n}×${v}×${d}`,
        x: caseInputs({ n, v, d, dtype: "f32", beta: 0.2, ignoreFraction: 0.2, seed: 11 }),
        dtype: "f32",
        beta: 0.2,
        vocabSplits: splits,
      });
    }
  },
});

Deno.test({
  name: "streaming calibration: exact ties resolve to the first index, across tiles and splits",
  ...GPU_TEST,
  async fn() {
    // C: unit-norm rows, with row 5 copied to rows 140 and 199 and row 3 to row 77. E rows are
    // 3·C_5 or 3·C_3, so the max logit is an exact tie between identical rows of C.
    const n = 24, v = 200, d = 16;
    const c = randomArray(v * d, 21);
    for (let j = 0; j < v; j++) {
      let s = 0;
      for (let k = 0; k < d; k++) s += c[j * d + k] ** 2;
      for (let k = 0; k < d; k++) c[j * d + k] /= Math.sqrt(s);
    }
    const copy = (from: number, to: number) => c.copyWithin(to * d, from * d, from * d + d);
    copy(5, 140);
    copy(5, 199);
    copy(3, 77);
    const e = new Float32Array(n * d);
    const targets = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const src = i % 2 === 0 ? 5 : 3;
      for (let k = 0; k < d; k++) e[i * d + k] = 3 * c[src * d + k];
      // targets: the first index, a duplicate, or something else
      targets[i] = [src, src === 5 ? 140 : 77, 0][i % 3];
    }
    const x = { n, v, d, e, c, targets };
    for (const vocabSplits of [1, 4]) {
      const got = await streamingCalibration(await testContext(), x, { vocabSplits });
      for (let i = 0; i < n; i++) {
        const first = i % 2 === 0 ? 5 : 3;
        assert.equal(got.tokens.argmax[i], first, `token ${i}, S = ${vocabSplits}`);
        assert.equal(got.tokens.correct[i], targets[i] === first ? 1 : 0);
      }
      assert.equal(lceReference(x, {}).perToken.argmax[0], 5);
    }
  },
});

Deno.test("tokenStatsFromFused: skips ignored rows, clamps, scores the argmax", () => {
  const stats = [2, 1, 1.5, 0.3, 0, 0, 0, 0, 5, 3, 4.9, -1e-7];
  const t = tokenStatsFromFused(
    { tokenStats: stats, lse: [2.3, 9, 5 - 1e-9], lossRows: [0.5, 0, 0.25] },
    [1, -100, 2],
  );
  assert.deepEqual(Array.from(t.rows), [0, 2]);
  assert.deepEqual(Array.from(t.correct), [1, 0]);
  assert.ok(Math.abs(t.confidence[0] - Math.exp(-0.3)) < 1e-15);
  assert.equal(t.confidence[1], 1); // max > lse by rounding: clamped
  assert.equal(t.entropy[1], 0); // negative by rounding: clamped
  assert.equal(t.meanLoss, 0.375);
  assert.deepEqual(Array.from(t.loss), [0.5, 0.25]);
  assert.throws(
    () => tokenStatsFromFused({ tokenStats: [0, 0, 0, 0], lse: [0], lossRows: [0] }, [-100]),
    InputError,
  );
  assert.throws(
    () => tokenStatsFromFused({ tokenStats: [0, 0, 0], lse: [0], lossRows: [0] }, [0]),
    InputError,
  );
  const bad = { tokenStats: [NaN, 0, 0, 0], lse: [0], lossRows: [0] };
  assert.throws(() => tokenStatsFromFused(bad, [0]), InputError);
});
