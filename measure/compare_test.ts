import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { reportCells } from "./compare_cells.ts";
import { compareReports, comparisonExitCode, formatComparison, ratioInterval } from "./compare.ts";

/** A table3-like report whose cells' samples are `samples(method, mode)`. */
function _report(
  samples: (method: string, mode: string) => number[] | undefined,
  o: { adapter?: string; engine?: string; shape?: [number, number, number]; check?: boolean } = {},
) {
  const [n, v, d] = o.shape ?? [256, 4096, 128];
  const rows = [];
  for (const method of ["baseline", "fused"]) {
    for (const mode of ["fwd", "bwd"]) {
      const s = samples(method, mode);
      rows.push({
        method,
        label: method,
        beta: 0.1,
        mode,
        timeMs: s ? s[0] : null,
        timeMsSamples: s,
        peakBytes: s ? 100 : null,
        ...(s ? {} : { error: "OOM: needs 9 MiB" }),
        ...(o.check === undefined ? {} : { check: { ok: o.check, error: o.check ? 1e-6 : null } }),
      });
    }
  }
  return {
    env: {
      adapter: { description: o.adapter ?? "llvmpipe", ...(o.engine ? { engine: o.engine } : {}) },
      date: "2026-11-25T00:00:00Z",
      git: { commit: "a".repeat(40), dirty: false },
    },
    shape: { n, v, d, dtype: "bf16" },
    fixture: "cce",
    reduction: "mean",
    rows,
  };
}

const jitter = (base: number, k: number) =>
  [base, base * 1.04, base * 0.97, base * 1.02, base * 0.99]
    .map((x) => x * k);

Deno.test("compare: the interval is seeded, ordered and holds the ratio of medians", () => {
  const a = [10, 11, 9, 10.5, 10.2], b = [20, 21, 19, 22, 20.5];
  const [lo, hi] = ratioInterval(a, b);
  assert.ok(lo <= 20.5 / 10.2 && 20.5 / 10.2 <= hi && lo > 1.7 && hi < 2.5, `[${lo}, ${hi}]`);
  assert.deepEqual(ratioInterval(a, b), [lo, hi], "same samples, same interval");
  const [l2, h2] = ratioInterval([10, 10.1], [10.05, 9.95]);
  assert.ok(l2 < 1 && h2 > 0.99);
});

Deno.test("compare: noise, slower, faster; exit code 1 only for slower (or incorrect)", () => {
  const a = reportCells(_report((m) => jitter(m === "fused" ? 20 : 50, 1)), "A.json");
  const same = reportCells(_report((m) => jitter(m === "fused" ? 20 : 50, 1.01)), "B.json");
  const c0 = compareReports(a, same);
  assert.equal(c0.cells.length, 4);
  assert.ok(c0.cells.every((x) => x.verdict === "within noise"), formatComparison(c0));
  assert.equal(comparisonExitCode(c0), 0);
  // fused twice as slow: slower; baseline twice as fast: faster
  const b = reportCells(_report((m) => jitter(m === "fused" ? 40 : 25, 1)), "B.json");
  const c1 = compareReports(a, b);
  assert.deepEqual(c1.cells.map((x) => [x.method, x.verdict]), [
    ["baseline", "faster"],
    ["baseline", "faster"],
    ["fused", "slower"],
    ["fused", "slower"],
  ]);
  assert.equal(comparisonExitCode(c1), 1);
  assert.ok(Math.abs(c1.cells[2].ratio - 2) < 0.05);
  const md = formatComparison(c1);
  assert.match(
    md,
    /\| fused \| 0\.1 \| fwd \| 256×4096×128 \| bf16 \| cce \| .* \| \*\*slower\*\* \|/,
  );
  assert.match(md, /2 slower, 2 faster, 0 within noise/);
  // a 3% change with a tight interval stays within noise at the 5% threshold, not at 1%
  const small = reportCells(_report(() => [10.3, 10.31, 10.29, 10.3]), "B.json");
  const tight = reportCells(_report(() => [10, 10.01, 9.99, 10]), "A.json");
  assert.equal(compareReports(tight, small).counts.slower, 0);
  assert.equal(compareReports(tight, small, { threshold: 0.01 }).counts.slower, 4);
});

Deno.test("compare: failed and single-sample cells are not compared; a lost check is incorrect", () => {
  const a = reportCells(
    _report((m, mode) => (m === "fused" && mode === "bwd" ? undefined : jitter(10, 1))),
    "A",
  );
  const b = reportCells(
    _report((m, mode) => (m === "baseline" && mode === "bwd" ? [10] : jitter(10, 1))),
    "B",
  );
  const c = compareReports(a, b);
  assert.equal(c.cells.length, 2);
  assert.deepEqual(c.notCompared.map((x) => x.why.slice(0, 12)).sort(), [
    "1 repetition",
    "failed in A:",
  ]);
  const good = reportCells(_report(() => jitter(10, 1), { check: true }), "A");
  const bad = reportCells(_report(() => jitter(10, 1), { check: false }), "B");
  const ci = compareReports(good, bad);
  assert.equal(ci.counts.incorrect, 4);
  assert.equal(comparisonExitCode(ci), 1);
  assert.equal(bad.cells[0].check?.error, Infinity, "a null error in JSON reads as Infinity");
});

Deno.test("compare: adapters and engines must match unless --across says; keys must meet", () => {
  const a = reportCells(_report(() => jitter(10, 1)), "A.json");
  const other = reportCells(_report(() => jitter(10, 1), { adapter: "NVIDIA H100" }), "B.json");
  assert.throws(() => compareReports(a, other), (e: unknown) => {
    assert.ok(e instanceof InputError);
    assert.match(e.message, /different adapters \(llvmpipe; NVIDIA H100\): give --across adapter/);
    return true;
  });
  assert.equal(compareReports(a, other, { across: ["adapter"] }).cells.length, 4);
  // one card as wgpu and as Dawn describe it: the same adapter
  const h200 = reportCells(_report(() => jitter(10, 1), { adapter: "NVIDIA H200" }), "A.json");
  const h200Dawn = reportCells(
    _report(() => jitter(10, 1), { adapter: "nvidia-h200", engine: "dawn" }),
    "B.json",
  );
  assert.equal(compareReports(h200, h200Dawn, { across: ["engine"] }).cells.length, 4);
  assert.equal(a.engine, "deno", "a report without the engine field is deno's");
  const dawn = reportCells(_report(() => jitter(10, 1), { engine: "dawn" }), "B.json");
  assert.throws(
    () => compareReports(a, dawn),
    /different WebGPU engines \(deno; dawn\): give --across engine/,
  );
  assert.equal(compareReports(a, dawn, { across: ["engine"] }).cells.length, 4);
  const elsewhere = reportCells(_report(() => jitter(10, 1), { shape: [8, 8, 8] }), "B.json");
  assert.throws(() => compareReports(a, elsewhere), /no cell in common/);
  assert.throws(() => reportCells({ rows: [] }, "x.json"), /x\.json: not a table3 or sweep report/);
  assert.throws(() => reportCells(null, "x.json"), /not a table3 or sweep report/);
  assert.throws(
    () => reportCells({ ..._report(() => [1, 2]), rows: [{ method: "m" }] }, "x.json"),
    /x\.json: cell 0 is not a measured row/,
  );
});

Deno.test("compare: sweep reports give their cells with each cell's shape", () => {
  const sweep = {
    env: { adapter: { description: "llvmpipe", engine: "deno" }, date: "" },
    base: { n: 8, v: 16, d: 4, dtype: "f32" },
    fixture: "cce",
    reduction: "sum",
    cells: [1, 2].map((k) => ({
      x: 16 * k,
      shape: { n: 8, v: 16 * k, d: 4, dtype: "f32" },
      row: { method: "fused", label: "F", beta: 0, mode: "fwd", timeMs: k, timeMsSamples: [k, k] },
    })),
  };
  const r = reportCells(sweep, "s.json");
  assert.equal(r.kind, "sweep");
  assert.deepEqual(r.cells.map((c) => [c.v, c.reduction, c.samples]), [[16, "sum", [1, 1]], [
    32,
    "sum",
    [2, 2],
  ]]);
  assert.equal(r.commit, null);
});
