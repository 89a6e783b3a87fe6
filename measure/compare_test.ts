import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { reportCells } from "./compare_cells.ts";
import { compareReports, comparisonExitCode, formatComparison, ratioInterval } from "./compare.ts";
import { passDiffs, passTotals } from "./compare_passes.ts";

/** A table3-like report whose cells' samples are `samples(method, mode)`. */
function _report(
  samples: (method: string, mode: string) => number[] | undefined,
  o: {
    adapter?: string;
    engine?: string;
    shape?: [number, number, number];
    check?: boolean;
    passMs?: (method: string, mode: string) => Record<string, number> | undefined;
  } = {},
) {
  const [n, v, d] = o.shape ?? [256, 4096, 128];
  const rows = [];
  for (const method of ["baseline", "fused"]) {
    for (const mode of ["fwd", "bwd"]) {
      const s = samples(method, mode), passMs = o.passMs?.(method, mode);
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
        ...(passMs ? { passMs } : {}),
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

Deno.test("compare: per-chunk passes are summed under one label, matched by name", () => {
  const t = passTotals({
    "logits[0] = E[chunk]·Cᵀ": 2,
    "logits[1] = E[chunk]·Cᵀ": 3,
    "dC[chunk 0]": 1,
  });
  assert.deepEqual([...t], [
    ["logits[chunk] = E[chunk]·Cᵀ", { ms: 5, count: 2 }],
    ["dC[chunk]", { ms: 1, count: 1 }],
  ]);
  const d = passDiffs({ "x[0]": 1, "x[1]": 1, y: 4 }, { "x[0]": 2, "x[1]": 2, "x[2]": 2, y: 3 });
  assert.deepEqual(d.map((p) => [p.pass, p.aMs, p.bMs, p.diffMs]), [
    ["x[chunk ×2 in A, ×3 in B]", 2, 6, 4],
    ["y", 4, 3, -1],
  ]);
  assert.deepEqual(passDiffs(undefined, undefined), []);
});

Deno.test("compare: a cell past the per-pass target lists its passes by B − A; others do not", () => {
  // fused fwd 1.5× slower (past 1.15), every other cell 1.01× (within it)
  type Passes = Record<string, number> | undefined;
  const passesA = (m: string, mode: string): Passes =>
    m === "fused" && mode === "fwd"
      ? { "tiles[0]": 8, "tiles[1]": 8, merge: 2, "old pass": 1, tiny: 0.5 }
      : { "logits = E·Cᵀ": 49, stats: 1 };
  const passesB = (m: string, mode: string): Passes =>
    m === "fused" && mode === "fwd"
      ? { "tiles[0]": 11, "tiles[1]": 12, merge: 2.5, tiny: 0.5, "new pass": 4 }
      : m === "baseline" && mode === "bwd"
      ? undefined
      : { "logits = E·Cᵀ": 49.5, stats: 1 };
  const k = (m: string, mode: string) => (m === "fused" && mode === "fwd" ? 1.5 : 1.01);
  const a = reportCells(
    _report((m) => jitter(m === "fused" ? 20 : 50, 1), { passMs: passesA }),
    "A",
  );
  const b = reportCells(
    _report((m, mode) => jitter(m === "fused" ? 20 : 50, k(m, mode)), { passMs: passesB }),
    "B",
  );
  assert.deepEqual(a.cells[2].passMs, passesA("fused", "fwd"), "passMs read from the report");
  const c = compareReports(a, b);
  assert.equal(c.explainAbove, 1.15);
  const fwd = c.cells.find((x) => x.method === "fused" && x.mode === "fwd")!;
  assert.deepEqual(fwd.passes!.map((p) => [p.pass, p.aMs, p.bMs, p.diffMs]), [
    ["tiles[chunk ×2]", 16, 23, 7],
    ["new pass", null, 4, 4],
    ["merge", 2, 2.5, 0.5],
    ["tiny", 0.5, 0.5, 0],
    ["old pass", 1, null, -1],
  ]);
  assert.equal(fwd.passes![0].ratio, 23 / 16);
  assert.equal(fwd.passes![1].ratio, null, "no ratio for a pass of one run");
  assert.deepEqual(
    c.cells.filter((x) => x.passes !== undefined).map((x) => `${x.method} ${x.mode}`),
    ["fused fwd"],
    "cells within the target have no passes",
  );
  const md = formatComparison(c);
  const section = md.slice(md.indexOf("## Where the difference is (per pass)"));
  assert.ok(section.length < md.length, md);
  assert.match(section, /Each cell whose B\/A exceeds 1\.15/);
  assert.match(
    section,
    /\*\*fused, β = 0\.1, fwd\*\* \(256×4096×128 bf16; 20\.00 → 30\.00 ms, B\/A 1\.500\)/,
  );
  const rows = section.split("\n").filter((l) => l.startsWith("| ") && !/^\| (pass|---) /.test(l));
  assert.deepEqual(rows, [
    "| tiles[chunk ×2] | 16.00 | 23.00 | 1.438 | +7.00 |",
    "| new pass | – | 4.00 | – | +4.00 |",
    "| merge | 2.00 | 2.50 | 1.250 | +0.50 |",
    "| tiny | 0.50 | 0.50 | 1.000 | ±0 |",
    "| old pass | 1.00 | – | – | −1.00 |",
  ]);
  assert.doesNotMatch(section, /baseline|stats/, "no cell within the target is listed");
  // a lower target lists every cell; baseline bwd has a breakdown in A only
  const all = compareReports(a, b, { explainAbove: 1.001 });
  assert.equal(all.cells.filter((x) => x.passes).length, 4);
  const bwd = all.cells.find((x) => x.method === "baseline" && x.mode === "bwd")!;
  assert.deepEqual(bwd.passes!.map((p) => [p.pass, p.bMs]), [["stats", null], [
    "logits = E·Cᵀ",
    null,
  ]]);
  // 0 turns it off: no field, no section
  const off = compareReports(a, b, { explainAbove: 0 });
  assert.ok(off.cells.every((x) => x.passes === undefined));
  assert.doesNotMatch(formatComparison(off), /per pass/);
  assert.throws(() => compareReports(a, b, { explainAbove: -1 }), /per-pass target must be ≥ 0/);
});

Deno.test("compare: a cell past the target without a breakdown on either side says so", () => {
  const a = reportCells(_report(() => jitter(10, 1)), "A");
  const b = reportCells(_report((m) => jitter(10, m === "fused" ? 2 : 1)), "B");
  const c = compareReports(a, b);
  assert.deepEqual(c.cells.map((x) => x.passes), [undefined, undefined, [], []]);
  const md = formatComparison(c);
  assert.match(
    md,
    /\n\*\*fused, β = 0\.1, bwd\*\* \(.*\): neither run has a per-pass breakdown\.\n/,
  );
  const same = compareReports(a, reportCells(_report(() => jitter(10, 1.01)), "B"));
  assert.match(formatComparison(same), /No compared cell's B\/A exceeds 1\.15\./);
});
