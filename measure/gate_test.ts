import assert from "node:assert/strict";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";
import { createTensor, download, upload } from "../gpu/tensor.ts";
import type { LceMethod, PreparedMethod } from "../methods/types.ts";
import { baseline } from "../methods/baseline.ts";
import { runGate } from "./gate.ts";
import {
  GATE_THRESHOLDS,
  type GateAdapter,
  type GateResult,
  type GateRun,
  type GateSuite,
  resultKey,
  TINY_SUITE,
} from "./gate_suites.ts";
import { binomialTail, judgeParity, judgeTime, signTestCount } from "./gate_stats.ts";
import { compareRuns } from "./gate_compare.ts";
import { formatComparison } from "./gate_format.ts";
import { median } from "./timing.ts";

// ---------------------------------------------------------------------------------------------
// Pure: statistics

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

/** Seeded standard normals (Box–Muller on testing/gpu.ts's uniform stream). */
function _normals(n: number, seed: number): number[] {
  const u = randomArray(2 * n, seed);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const a = (u[2 * i] + 1) / 2 || 1e-12, b = (u[2 * i + 1] + 1) / 2;
    out.push(Math.sqrt(-2 * Math.log(a)) * Math.cos(2 * Math.PI * b));
  }
  return out;
}

/**
 * Simulated per-round ratios: true ratio × lognormal noise (σ = 0.15 in log, about the spread of
 * CPU-time ratios measured on lavapipe while other test processes load the two cores), and one
 * round in ten hit by a ×2 outlier.
 */
function _rounds(trueRatio: number, n: number, seed: number): number[] {
  const z = _normals(n, seed);
  const out = randomArray(n, seed + 7777);
  return z.map((x, i) => trueRatio * Math.exp(0.15 * x) * (out[i] > 0.8 ? 2 : 1));
}

Deno.test("gate: the time verdict never flags unchanged code and catches 2× and 3×", () => {
  const trials = 2000;
  let falseAlarms = 0, caught2 = 0, caught3 = 0, worstQ = 0;
  for (let t = 0; t < trials; t++) {
    const base = median(_rounds(4, 14, 3 * t + 1)); // --update: twice the rounds
    const same = judgeTime(_rounds(4, 7, 3 * t + 2), base);
    worstQ = Math.max(worstQ, same.q);
    if (same.regressed) falseAlarms++;
    if (judgeTime(_rounds(8, 7, 3 * t + 3), base).regressed) caught2++;
    if (judgeTime(_rounds(12, 7, 3 * t + 3), base).regressed) caught3++;
  }
  assert.equal(falseAlarms, 0, `worst median q ${worstQ}`);
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

// ---------------------------------------------------------------------------------------------
// Pure: comparison

const ADAPTER: GateAdapter = {
  slug: "llvmpipe-test",
  description: "llvmpipe (test)",
  isFallbackAdapter: true,
  timeSource: "cpu",
};

function _result(method: string, o: Partial<GateResult> = {}, ratio = 2): GateResult {
  const mode = (peak: number) => ({
    peakBytes: peak,
    timeRatio: ratio,
    ratios: Array(7).fill(ratio),
    timeMs: 10 * ratio,
  });
  return {
    fixture: "cce",
    n: 8,
    v: 20,
    d: 4,
    dtype: "bf16",
    method,
    beta: 0.1,
    parity: { loss: 1e-7, dE: 1e-6, dC: 1e-6 },
    yardstickMs: 10,
    modes: { fwd: mode(1000), bwd: mode(2000), "fwd+bwd": mode(3000) },
    ...o,
  };
}

function _run(results: GateResult[], adapter = ADAPTER): GateRun {
  return {
    version: 1,
    suite: "test",
    adapter,
    env: { deno: "2.9.6", os: "linux", date: "2026-01-01T00:00:00Z" },
    rounds: 7,
    thresholds: GATE_THRESHOLDS,
    results,
  };
}

Deno.test("gate: identical runs pass with nothing to report", () => {
  const base = _run([_result("a"), _result("b")]);
  const c = compareRuns(structuredClone(base), base);
  assert.equal(c.passed, true);
  assert.deepEqual(c.findings, []);
  assert.equal(c.timeGated, true);
  assert.equal(c.machineSpeed, 1);
  assert.deepEqual(c.summary.map((s) => [s.method, s.results, s.medianQ, s.failures]), [
    ["a", 1, 1, 0],
    ["b", 1, 1, 0],
  ]);
  assert.match(formatComparison(c), /gate: passed \(2 results\)/);
});

Deno.test("gate: memory growth fails, shrinkage passes as an improvement", () => {
  const base = _run([_result("a")]);
  const cur = structuredClone(base);
  cur.results[0].modes.fwd!.peakBytes = 1004;
  cur.results[0].modes.bwd!.peakBytes = 1500;
  const c = compareRuns(cur, base);
  assert.equal(c.passed, false);
  const byMode = Object.fromEntries(c.findings.map((f) => [f.mode, f]));
  assert.deepEqual([byMode.fwd.check, byMode.fwd.status], ["memory", "fail"]);
  assert.match(byMode.fwd.detail, /^\+4 bytes/);
  assert.deepEqual([byMode.bwd.check, byMode.bwd.status], ["memory", "better"]);
  assert.equal(c.summary[0].memoryDelta, 4 - 500);
  const text = formatComparison(c);
  assert.match(text, /REGRESSIONS \(1\):/);
  assert.match(text, /\| memory \| cce 8x20x4 bf16 a β=0\.1 \| fwd +\| 1000 +\| 1004 /);
  assert.match(text, /gate: FAILED \(1 regressions\)/);
});

Deno.test("gate: parity drift fails against the baseline and the absolute limit", () => {
  const base = _run([_result("a"), _result("b")]);
  base.results[1].parity!.loss = 0.04; // a 16-bit-logits method: the limit binds first
  const cur = structuredClone(base);
  cur.results[0].parity!.dC = 5e-4; // dropped β/|V| term: far above 1.5 × 1e-6 + 1e-5
  cur.results[1].parity!.loss = 0.2;
  const c = compareRuns(cur, base);
  assert.equal(c.passed, false);
  assert.deepEqual(
    c.findings.map((f) => [f.method, f.check, f.status, f.current]),
    [["a", "parity", "fail", "5.0e-4"], ["b", "parity", "fail", "2.0e-1"]],
  );
  assert.match(c.findings[0].detail, /dC error above 1\.2e-5 \(1\.5× baseline/);
  assert.match(c.findings[1].detail, /loss error above 5\.0e-2 \(the limit/);
});

Deno.test("gate: time regressions are gated on the same adapter only", () => {
  const base = _run([_result("a", {}, 2)]);
  const slow = _run([_result("a", {}, 4.4)]);
  const c = compareRuns(slow, base);
  assert.equal(c.passed, false);
  assert.deepEqual(c.findings.map((f) => [f.check, f.mode, f.status]), [
    ["time", "fwd", "fail"],
    ["time", "bwd", "fail"],
    ["time", "fwd+bwd", "fail"],
  ]);
  assert.match(
    c.findings[0].detail,
    /median 2\.20× the baseline ratio; 7\/7 rounds above 1× \(sign test p = 0\.0078\)/,
  );
  assert.deepEqual(c.timeRegressed.map((x) => x.mode), ["fwd", "bwd", "fwd+bwd"]);
  // measured on another adapter: shown, not gated, and said so
  const other = _run([_result("a", {}, 4.4)], {
    ...ADAPTER,
    slug: "nvidia-h100",
    description: "H100",
  });
  const o = compareRuns(other, base);
  assert.equal(o.passed, true);
  assert.equal(o.timeGated, false);
  assert.deepEqual(o.timeRegressed, []);
  assert.ok(o.findings.every((f) => f.status === "info"));
  assert.match(o.notes[0], /another adapter .* time ratios and absolute times are shown but not/);
  assert.match(formatComparison(o), /note: baseline measured on another adapter/);
  assert.equal(o.machineSpeed, null);
});

Deno.test("gate: new, missing and failing methods", () => {
  const base = _run([_result("a"), _result("gone"), _result("u", { error: "unsupported: x" })]);
  const cur = _run([
    _result("a", { error: "GpuError: boom" }),
    _result("new"),
    _result("u", { error: "unsupported: x" }),
    _result("nu", { error: "unsupported: no shader-f16" }),
  ]);
  const c = compareRuns(cur, base);
  assert.deepEqual(c.findings.map((f) => [f.method, f.check, f.status]), [
    ["a", "error", "fail"],
    ["new", "new", "info"],
    ["nu", "new", "info"],
    ["gone", "missing", "fail"],
  ]);
  assert.equal(c.passed, false);
  // with --methods, methods not measured are not missing
  const partial = compareRuns(_run([_result("a")]), base, { partial: true });
  assert.equal(partial.passed, true);
  assert.deepEqual(partial.findings, []);
  // a mode that now fails
  const modeFail = structuredClone(base);
  modeFail.results[0].modes.bwd = {
    peakBytes: null,
    timeRatio: null,
    ratios: [],
    timeMs: null,
    error: "OOM: needs 1 MiB",
  };
  const m = compareRuns(modeFail, base);
  assert.deepEqual(m.findings.map((f) => [f.check, f.mode, f.detail]), [
    ["error", "bwd", "OOM: needs 1 MiB"],
  ]);
});

Deno.test("gate: result keys name fixture, shape, dtype, method and β", () => {
  assert.equal(resultKey(_result("fused", { beta: 0 })), "cce 8x20x4 bf16 fused β=0");
});

// ---------------------------------------------------------------------------------------------
// GPU: planted regressions on a tiny suite

/** What a planted regression does to the wrapped method. */
interface _Plant {
  /** Bytes of one more workspace buffer in the forward. */
  extraBytes?: number;
  /** Records the forward and the backward this many times (the last results are returned). */
  repeat?: number;
  /** Adds back the gradient of the β/|V| term, as a method that dropped it would return. */
  dropBetaTerm?: boolean;
}

/** `inner` with a planted regression, under the same name (as if the tree had changed). */
function _planted(inner: LceMethod, plant: _Plant): LceMethod {
  return {
    ...inner,
    async prepare(ctx, spec, opts) {
      const p = await inner.prepare(ctx, spec, opts);
      const repeat = plant.repeat ?? 1;
      const wrapped: PreparedMethod = {
        async forward(rec, x) {
          for (let i = 1; i < repeat; i++) {
            const f = await p.forward(rec, x);
            await rec.flush();
            p.dispose(f.saved);
            f.loss.destroy();
          }
          if (plant.extraBytes) {
            const t = createTensor(ctx, {
              dtype: "f32",
              rows: plant.extraBytes / 4,
              cols: 1,
              role: "workspace",
              label: "planted",
            });
            rec.release(...t.shards.map((s) => s.buffer));
          }
          return await p.forward(rec, x);
        },
        async backward(rec, x, saved, gradOut) {
          for (let i = 1; i < repeat; i++) {
            const g = await p.backward(rec, x, saved, gradOut);
            await rec.flush();
            g.dE.destroy();
            g.dC.destroy();
          }
          const g = await p.backward(rec, x, saved, gradOut);
          if (!plant.dropBetaTerm || opts.beta === 0) return g;
          // G gains +w_n·β/v everywhere: dE += (β/v)·w ⊗ Σ_v C_v, dC += (β/v)·1 ⊗ Σ_n w_n E_n
          await rec.flush();
          const [e, c, t, go, dE, dC] = await Promise.all(
            [x.e, x.c, x.targets, gradOut, g.dE, g.dC].map((a) => download(ctx, a)),
          );
          const { n, v, d } = spec;
          const valid = Array.from(t, (ti) => ti !== opts.ignoreIndex);
          const count = valid.filter((b) => b).length;
          const w = valid.map((b) => (b ? go[0] / count : 0));
          const colSum = new Float64Array(d), wE = new Float64Array(d);
          for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) colSum[k] += c[j * d + k];
          for (let i = 0; i < n; i++) for (let k = 0; k < d; k++) wE[k] += w[i] * e[i * d + k];
          const s = opts.beta / v;
          for (let i = 0; i < n; i++) {
            for (let k = 0; k < d; k++) dE[i * d + k] += s * w[i] * colSum[k];
          }
          for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) dC[j * d + k] += s * wE[k];
          upload(ctx, g.dE, dE);
          upload(ctx, g.dC, dC);
          return g;
        },
        dispose: (saved) => p.dispose(saved),
        release: () => p.release?.(),
      };
      return wrapped;
    },
  };
}

const SUITE: GateSuite = TINY_SUITE;

async function _gate(methods: LceMethod[], base?: GateRun) {
  const ctx = await testContext();
  return await runGate(ctx, {
    suite: SUITE,
    methods,
    adapter: { ...ADAPTER, slug: "test" },
    env: { deno: "test", os: "test", date: "2026-01-01T00:00:00Z" },
    baseline: base,
  });
}

let _baseline: Promise<GateRun> | undefined;
/** The unchanged method's run, measured once per file with twice the rounds (like --update). */
function _base(): Promise<GateRun> {
  _baseline ??= (async () => {
    const ctx = await testContext();
    return (await runGate(ctx, {
      suite: SUITE,
      methods: [baseline],
      rounds: 2 * SUITE.rounds,
      adapter: { ...ADAPTER, slug: "test" },
      env: { deno: "test", os: "test", date: "2026-01-01T00:00:00Z" },
    })).run;
  })();
  return _baseline;
}

Deno.test({
  name: "gate: the unchanged method passes run after run",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    assert.equal(base.results.length, SUITE.cases.length * SUITE.betas.length);
    assert.ok(base.results.every((r) => r.error === undefined), JSON.stringify(base.results));
    for (let i = 0; i < 4; i++) {
      const { comparison } = await _gate([baseline], base);
      assert.ok(comparison!.passed, formatComparison(comparison!));
      assert.ok(comparison!.findings.every((f) => f.check !== "memory"));
    }
  },
});

Deno.test({
  name: "gate: one more buffer fails memory",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    const { comparison } = await _gate([_planted(baseline, { extraBytes: 256 })], base);
    const c = comparison!;
    assert.equal(c.passed, false);
    const mem = c.findings.filter((f) => f.check === "memory");
    assert.ok(mem.some((f) => f.mode === "fwd" && f.status === "fail"), formatComparison(c));
    assert.ok(mem.every((f) => f.detail.startsWith("+256 bytes")), formatComparison(c));
    assert.ok(c.findings.every((f) => f.check === "memory"), formatComparison(c));
  },
});

Deno.test({
  name: "gate: doing the work twice or three times fails time (after a re-run)",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    for (const repeat of [2, 3]) {
      const { comparison, rerun } = await _gate([_planted(baseline, { repeat })], base);
      const c = comparison!;
      assert.equal(c.passed, false, `${repeat}×: ${formatComparison(c)}`);
      const slow = c.findings.filter((f) => f.check === "time" && f.status === "fail");
      assert.ok(slow.some((f) => f.mode === "fwd+bwd"), `${repeat}×: ${formatComparison(c)}`);
      assert.ok(rerun.length >= slow.length);
      assert.ok(c.findings.every((f) => f.check === "time"), formatComparison(c));
    }
  },
});

Deno.test({
  name: "gate: a gradient without the β/|V| term fails parity",
  ...GPU_TEST,
  async fn() {
    const base = await _base();
    const { comparison } = await _gate([_planted(baseline, { dropBetaTerm: true })], base);
    const c = comparison!;
    assert.equal(c.passed, false);
    const par = c.findings.filter((f) => f.check === "parity" && f.status === "fail");
    assert.deepEqual(
      par.map((f) => f.detail.split(" ")[0]).sort(),
      ["dC", "dE"],
      formatComparison(c),
    );
  },
});
