import assert from "node:assert/strict";
import {
  GATE_THRESHOLDS,
  type GateAdapter,
  type GateResult,
  type GateRun,
  resultKey,
} from "./gate_suites.ts";
import { compareRuns } from "./gate_compare.ts";
import { formatComparison } from "./gate_format.ts";
import { InputError } from "../core/errors.ts";

const ADAPTER: GateAdapter = {
  slug: "llvmpipe-test",
  description: "llvmpipe (test)",
  isFallbackAdapter: true,
  timeSource: "cpu",
  engine: "deno",
  driver: "Mesa 25.0.7",
  host: "CPU A",
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
  assert.equal(c.compared, 2);
  assert.match(formatComparison(c), /\ngate: passed: memory, parity and time of 2 results$/);
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
  assert.match(text, /gate: FAILED \(1 regression\)$/);
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

Deno.test("gate: time regressions are gated on the same host only, and the last line says so", () => {
  const base = _run([_result("a", {}, 2)]);
  const slow = _run([_result("a", {}, 4.4)]);
  const c = compareRuns(slow, base);
  assert.equal(c.passed, false);
  assert.deepEqual(c.findings.map((f) => [f.check, f.mode, f.status]), [
    ["time", "fwd", "fail"],
    ["time", "bwd", "fail"],
    ["time", "fwd+bwd", "fail"],
  ]);
  // one meaning of a speed ratio: × faster than the baseline, < 1 slower
  assert.match(
    c.findings[0].detail,
    /^0\.45× faster than the baseline \(median\); 7\/7 rounds slower than it \(sign test p = 0\.0078\)/,
  );
  assert.match(formatComparison(c), /\| a +\| 1 +\| 1\.0e-6 +\| 0\.45× +\| 0\.45× +\| 0\.45× /);
  assert.match(formatComparison(c), /speed: × faster than the baseline = the baseline's time/);
  assert.deepEqual(c.timeRegressed.map((x) => x.mode), ["fwd", "bwd", "fwd+bwd"]);
  // another adapter, another CPU, another driver, another engine, no CPU known: memory and
  // parity only, not "passed" without saying what was checked
  const others: [Partial<GateAdapter>, RegExp][] = [
    [
      { slug: "nvidia-h100", description: "H100", host: undefined },
      /baseline from CPU A \(Mesa 25\.0\.7, deno\), this host H100 \(Mesa 25\.0\.7, deno\)/,
    ],
    [
      { host: "CPU B" },
      /baseline from CPU A \(Mesa 25\.0\.7, deno\), this host CPU B \(Mesa 25\.0\.7, deno\)$/,
    ],
    [{ driver: "Mesa 22.3.6" }, /this host CPU A \(Mesa 22\.3\.6, deno\)$/],
    [{ engine: "dawn" }, /this host CPU A \(Mesa 25\.0\.7, dawn\)$/],
    [{ host: undefined }, /this host llvmpipe \(test\) \(Mesa 25\.0\.7, deno\)$/],
  ];
  for (const [change, line] of others) {
    const o = compareRuns(_run([_result("a", {}, 4.4)], { ...ADAPTER, ...change }), base);
    assert.equal(o.passed, true, JSON.stringify(change));
    assert.equal(o.timeGated, false);
    assert.deepEqual(o.timeRegressed, []);
    assert.ok(o.findings.every((f) => f.status === "info"));
    assert.equal(o.machineSpeed, null);
    const last = formatComparison(o).split("\n").at(-1)!;
    assert.match(last, /^gate: passed: memory and parity of 1 result; time not compared: /);
    assert.match(last, line);
  }
  const sameHost = compareRuns(_run([_result("a", {}, 4.4)], { ...ADAPTER }), base);
  assert.equal(sameHost.passed, false);
  assert.equal(sameHost.timeGated, true);
});

Deno.test("gate: a result on one side only fails unless its method is optional", () => {
  const base = _run([_result("a"), _result("gone"), _result("u", { error: "unsupported: x" })]);
  const cur = _run([
    _result("a", { error: "GpuError: boom" }),
    _result("new"),
    _result("u", { error: "unsupported: x" }),
    _result("nu", { error: "unsupported: no shader-f16" }),
  ]);
  const c = compareRuns(cur, base);
  // a new result the adapter cannot run has no measurement on either side: said, not failed
  assert.deepEqual(c.findings.map((f) => [f.method, f.check, f.status]), [
    ["a", "error", "fail"],
    ["new", "new", "fail"],
    ["nu", "new", "info"],
    ["gone", "missing", "fail"],
  ]);
  assert.match(c.findings[2].detail, /not run on this adapter \(unsupported: no shader-f16\)/);
  assert.equal(c.passed, false);
  assert.equal(c.compared, 2);
  // the suite's optional methods may be on one side only
  const opt = compareRuns(cur, base, { optional: ["new", "nu", "gone"] });
  assert.deepEqual(opt.findings.map((f) => [f.method, f.check, f.status]), [
    ["a", "error", "fail"],
    ["new", "new", "info"],
    ["nu", "new", "info"],
    ["gone", "missing", "info"],
  ]);
  // with --methods, methods not measured are not missing
  const partial = compareRuns(_run([_result("a")]), base, { partial: true });
  assert.equal(partial.passed, true);
  assert.deepEqual(partial.findings, []);
  // a mode that now fails, a mode on one side only
  const modeFail = structuredClone(base);
  modeFail.results[0].modes.bwd = {
    peakBytes: null,
    timeRatio: null,
    ratios: [],
    timeMs: null,
    error: "OOM: needs 1 MiB",
  };
  delete modeFail.results[0].modes.fwd;
  const m = compareRuns(modeFail, base);
  assert.deepEqual(m.findings.map((f) => [f.check, f.mode, f.status, f.detail]), [
    ["error", "bwd", "fail", "OOM: needs 1 MiB"],
    ["missing", "fwd", "fail", "mode in the baseline but not measured (./dev task gate --update)"],
  ]);
});

Deno.test("gate: a run and a baseline with no result in common are bad input", () => {
  const base = _run([_result("a", { n: 16 })]);
  assert.throws(
    () => compareRuns(_run([_result("a")]), base),
    (e: Error) => {
      assert.ok(e instanceof InputError);
      assert.match(
        e.message,
        /^the run and the baseline have no result in common, so nothing can be compared: run 1 \(e\.g\. cce 8x20x4 bf16 a β=0\.1\), baseline 1 \(e\.g\. cce 16x20x4 bf16 a β=0\.1\)$/,
      );
      return true;
    },
  );
  // --methods naming a method the baseline lacks compares nothing either
  assert.throws(
    () => compareRuns(_run([_result("b")]), _run([_result("a")]), { partial: true }),
    InputError,
  );
});

Deno.test("gate: result keys name fixture, shape, dtype, method and β", () => {
  assert.equal(resultKey(_result("fused", { beta: 0 })), "cce 8x20x4 bf16 fused β=0");
});
