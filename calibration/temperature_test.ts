import assert from "node:assert/strict";
import type { HostInputs } from "../core/options.ts";
import { InputError } from "../core/errors.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { logitRow, widen } from "../reference/logit_row.ts";
import { caseInputs } from "../testing/parity.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";
import { binIndex, calibrationMetrics, tokenStatsFromLogits } from "./metrics.ts";
import { entropyCalibration } from "./entropy_calibration.ts";
import { fitTemperature, prepareTemperatureScan, T_MAX } from "./temperature.ts";

/** Float64 logits of the inputs as given (f32 values widened), softcap applied: n×v. */
function referenceLogits(x: HostInputs, softcap?: number): Float64Array {
  const w = widen(x);
  const out = new Float64Array(x.n * x.v);
  const row = new Float64Array(x.v);
  for (let i = 0; i < x.n; i++) out.set(logitRow(w, i, row, softcap), i * x.v);
  return out;
}

/**
 * Float64 statistics at temperature T straight from the definition: the model's (capped) logits
 * divided by T, for every kept token. Independent of the E/T, s/T identity the GPU path uses.
 */
function referenceAt(x: HostInputs, logits: Float64Array, t: number) {
  const conf: number[] = [], correct: number[] = [], ent: number[] = [], nll: number[] = [];
  let absLse = 0;
  const row = new Float64Array(x.v);
  for (let i = 0; i < x.n; i++) {
    if (x.targets[i] === -100) continue;
    for (let j = 0; j < x.v; j++) row[j] = logits[i * x.v + j] / t;
    const s = tokenStatsFromLogits(row, x.targets[i]);
    let max = -Infinity;
    for (const z of row) max = Math.max(max, z);
    let sum = 0;
    for (const z of row) sum += Math.exp(z - max);
    nll.push(max + Math.log(sum) - row[x.targets[i]]);
    absLse += Math.abs(max + Math.log(sum));
    conf.push(s.confidence);
    correct.push(s.correct ? 1 : 0);
    ent.push(s.entropy);
  }
  const report = calibrationMetrics({ confidence: conf, correct, entropy: ent });
  const nllMean = nll.reduce((a, b) => a + b, 0) / nll.length;
  return { report, nll: nllMean, conf, correct, meanAbsLse: absLse / nll.length };
}

/** The reference's own optimum: golden-section search of the float64 mean NLL in log T. */
function referenceOptimum(x: HostInputs, logits: Float64Array, lo: number, hi: number) {
  const f = (u: number) => referenceAt(x, logits, Math.exp(u)).nll;
  const g = (Math.sqrt(5) - 1) / 2;
  let a = Math.log(lo), b = Math.log(hi);
  let c = b - g * (b - a), d = a + g * (b - a);
  let fc = f(c), fd = f(d);
  while (b - a > 1e-9) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - g * (b - a);
      fc = f(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + g * (b - a);
      fd = f(d);
    }
  }
  const u = (a + b) / 2;
  return { temperature: Math.exp(u), nll: f(u) };
}

const rel = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

interface Case {
  name: string;
  x: HostInputs;
  softcap?: number;
  temperatures: number[];
  fit?: boolean;
  vocabSplits?: number;
}

const CASES: Case[] = [
  {
    name: "llm 333×517×45, ignored rows",
    x: makeFixture("llm", { n: 333, v: 517, d: 45, seed: 3, ignoreFraction: 0.1 }),
    temperatures: [0.3, 0.55, 1, 1.9],
    fit: true,
  },
  {
    name: "llm 201×1031×37, softcap 20, ignored rows",
    x: makeFixture("llm", { n: 201, v: 1031, d: 37, seed: 6, ignoreFraction: 0.15 }),
    softcap: 20,
    temperatures: [0.8, 2.7],
    fit: true,
    vocabSplits: 3,
  },
  {
    name: "random 77×131×29, softcap 1.5, ignored rows",
    x: caseInputs({ n: 77, v: 131, d: 29, dtype: "f32", beta: 0, ignoreFraction: 0.2, seed: 11 }),
    softcap: 1.5,
    temperatures: [0.3, 1.3],
  },
];

Deno.test({
  name: "temperature scan: NLL, ECE and entropy at T match float64 within 1e-6 relative; " +
    "the fitted T* reaches the reference's optimum",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const c of CASES) {
      const logits = referenceLogits(c.x, c.softcap);
      const scan = await prepareTemperatureScan(ctx, c.x, {
        softcap: c.softcap,
        vocabSplits: c.vocabSplits,
      });
      try {
        for (const t of c.temperatures) {
          const got = await scan.at(t);
          const want = referenceAt(c.x, logits, t);
          const what = `${c.name}, T = ${t}`;
          // same tokens in the same bins with the same correctness, or ECE is not comparable
          assert.equal(got.tokens.confidence.length, want.conf.length, `${what}: kept tokens`);
          for (let k = 0; k < want.conf.length; k++) {
            assert.equal(got.tokens.correct[k], want.correct[k], `${what}: token ${k} argmax`);
            assert.equal(
              binIndex(got.tokens.confidence[k], 15),
              binIndex(want.conf[k], 15),
              `${what}: token ${k} bin (confidence ${got.tokens.confidence[k]} vs ${want.conf[k]})`,
            );
          }
          assert.ok(rel(got.nll, want.nll) <= 1e-6, `${what}: NLL ${got.nll} vs ${want.nll}`);
          assert.ok(
            rel(got.report.ece, want.report.ece) <= 1e-6,
            `${what}: ECE ${got.report.ece} vs ${want.report.ece}`,
          );
          // The kernel forms H = log Σe^{z−m} − Σp·(z − m) relative to the row max (no
          // cancellation against the LSE), so H holds 1e-6 relative even where it is small
          // against the logits (T = 0.3: H 0.13, LSE 45).
          assert.ok(
            rel(got.report.meanEntropy, want.report.meanEntropy) <= 1e-6,
            `${what}: entropy ${got.report.meanEntropy} vs ${want.report.meanEntropy}`,
          );
          assert.ok(rel(got.report.rmsce, want.report.rmsce) <= 1e-5, `${what}: RMSCE`);
          assert.equal(got.report.accuracy, want.report.accuracy, `${what}: accuracy`);
          assert.ok(
            Math.abs(got.slope - (want.report.meanEntropy - want.nll)) <= 1e-6 * want.nll,
            `${what}: slope`,
          );
        }
        if (!c.fit) continue;
        const before = scan.forwards;
        const fit = await scan.fit();
        assert.equal(scan.forwards - before, fit.evaluations, "one forward per step");
        const opt = referenceOptimum(c.x, logits, fit.bracket[0], fit.bracket[1]);
        const atFit = referenceAt(c.x, logits, fit.temperature).nll;
        assert.ok(
          rel(fit.temperature, opt.temperature) <= 1e-4,
          `${c.name}: T* ${fit.temperature} vs ${opt.temperature}`,
        );
        assert.ok(
          atFit - opt.nll <= 1e-6 * opt.nll,
          `${c.name}: NLL at T* ${atFit} vs optimum ${opt.nll}`,
        );
        assert.ok(rel(fit.point.nll, opt.nll) <= 1e-6, `${c.name}: GPU NLL at T*`);
        // stationarity: the entropy gap vanishes at T*
        assert.ok(Math.abs(fit.point.slope) <= 1e-3 * opt.nll, `${c.name}: gap ${fit.point.slope}`);
        assert.ok(fit.evaluations <= 20, `${c.name}: ${fit.evaluations} evaluations`);
        const one = referenceAt(c.x, logits, 1);
        assert.ok(opt.nll < one.nll, `${c.name}: the optimum beats T = 1`);
        // the uncapped llm fixture is over-confident (T* > 1); a softcap of 20 squashes its
        // logits enough to make it under-confident (T* < 1)
        assert.equal(fit.temperature > 1, c.softcap === undefined, `${c.name}: ${fit.temperature}`);
      } finally {
        scan.destroy();
      }
    }
  },
});

Deno.test({
  name: "temperature scan: memory above the inputs is O(n), not O(n·|V|)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const x = makeFixture("llm", { n: 257, v: 4099, d: 19, seed: 8, ignoreFraction: 0.1 });
    for (const softcap of [undefined, 3]) {
      const scan = await prepareTemperatureScan(ctx, x, { softcap });
      try {
        const inputs = [scan.inputs.e, scan.inputs.c, scan.inputs.targets];
        const inputBytes = inputs.reduce(
          (s, t) => s + t.shards.reduce((a, sh) => a + sh.buffer.size, 0),
          0,
        );
        const live = ctx.memory().liveBytes;
        ctx.resetPeak();
        await scan.at(1.7);
        await scan.fit();
        const above = ctx.memory().peakBytes - live;
        assert.equal(ctx.memory().liveBytes, live, "nothing left behind");
        assert.ok(live >= inputBytes);
        // n·S·20 bytes of workspace (S ≤ 16 on a software adapter) and n×6 f32 outputs
        const bound = x.n * (16 * 20 + 6 * 4) + 4096;
        assert.ok(above <= bound, `softcap ${softcap}: ${above} bytes above the inputs`);
        assert.ok(above < (x.n * x.v * 4) / 8, "far below one f32 logits matrix");
      } finally {
        scan.destroy();
      }
    }
  },
});

Deno.test({
  name: "temperature scan: a fit that cannot bracket says so; T must be positive and finite",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // every target is its row's argmax (E_i = 3·C_{t_i}, unit rows): the NLL falls towards T → 0
    const n = 9, v = 13, d = 16;
    const x = makeFixture("llm", { n, v, d, seed: 1 });
    for (let i = 0; i < n; i++) {
      x.targets[i] = i;
      for (let k = 0; k < d; k++) x.e[i * d + k] = 3 * x.c[i * d + k];
    }
    const logits = referenceLogits(x);
    for (let i = 0; i < n; i++) {
      const row = logits.subarray(i * v, (i + 1) * v);
      assert.equal(row.indexOf(Math.max(...row)), i, "target is the argmax");
    }
    const scan = await prepareTemperatureScan(ctx, x);
    try {
      await assert.rejects(() => scan.fit(), (e: Error) => {
        assert.ok(e instanceof InputError);
        assert.match(
          e.message,
          /cannot bracket a minimum .* (still increases|is flat) at T = 1e-4/,
        );
        assert.ok(!e.message.includes("\n"));
        return true;
      });
      for (const t of [0, -1, NaN, Infinity]) {
        await assert.rejects(() => scan.at(t), InputError);
      }
    } finally {
      scan.destroy();
    }
  },
});

Deno.test("fitTemperature: brackets and finds the root of the slope to rtol", async () => {
  for (const [star, start] of [[2.5, 1], [0.03, 1], [1, 1], [7000, 0.5], [1.00003, 1]]) {
    // NLL(u) = cosh(u − log T*) in u = log T: convex, slope sinh(u − log T*)
    const f = (t: number) =>
      Promise.resolve({
        temperature: t,
        nll: Math.cosh(Math.log(t / star)),
        slope: Math.sinh(Math.log(t / star)),
      });
    const fit = await fitTemperature(f, { start });
    assert.ok(rel(fit.temperature, star) <= 1e-4, `${star}: ${fit.temperature}`);
    assert.ok(fit.bracket[0] <= star && star <= fit.bracket[1], `${star}: bracket ${fit.bracket}`);
    assert.equal(fit.trace.length, fit.evaluations);
    assert.equal(fit.point.temperature, fit.temperature);
    const tight = await fitTemperature(f, { start, rtol: 1e-9 });
    assert.ok(rel(tight.temperature, star) <= 1e-9, `${star}: tight ${tight.temperature}`);
  }
  // no minimum: the slope never changes sign
  const falling = (t: number) => Promise.resolve({ temperature: t, nll: 1 / t, slope: -1 / t });
  await assert.rejects(
    () => fitTemperature(falling),
    /cannot bracket a minimum of the mean NLL in T ∈ \[1e-4, 1e\+4\]: it still decreases at T = 1e\+4/,
  );
  await assert.rejects(() => fitTemperature(falling, { start: T_MAX }), InputError);
  const nan = (t: number) => Promise.resolve({ temperature: t, nll: NaN, slope: NaN });
  await assert.rejects(() => fitTemperature(nan), InputError);
  for (const start of [0, -2, Infinity, NaN]) {
    await assert.rejects(() => fitTemperature(falling, { start }), /positive and finite/);
  }
});

Deno.test("entropyCalibration: means, gap and per-bin values", () => {
  const r = entropyCalibration(
    { confidence: [0.05, 0.5, 0.55, 1], entropy: [3, 1, 2, 0], nll: [4, 1.5, 0.5, 0.1] },
    { bins: 10 },
  );
  assert.equal(r.count, 4);
  assert.equal(r.meanEntropy, 1.5);
  assert.equal(r.meanNll, 1.525);
  assert.ok(Math.abs(r.gap + 0.025) < 1e-15);
  assert.equal(r.perBin.length, 10);
  assert.deepEqual(r.perBin[0], { lo: 0, hi: 0.1, count: 1, entropy: 3, nll: 4, gap: -1 });
  assert.equal(r.perBin[4].count, 1); // 0.5 is an inner edge: the lower bin
  assert.equal(r.perBin[5].count, 1);
  assert.equal(r.perBin[9].nll, 0.1);
  assert.ok(Number.isNaN(r.perBin[2].gap));
  assert.throws(() => entropyCalibration({ confidence: [], entropy: [], nll: [] }), InputError);
  assert.throws(
    () => entropyCalibration({ confidence: [0.5], entropy: [1], nll: [NaN] }),
    InputError,
  );
  assert.throws(
    () => entropyCalibration({ confidence: [1.5], entropy: [1], nll: [1] }),
    InputError,
  );
});
