import assert from "node:assert/strict";
import { testReportEnv } from "../testing/report_env.ts";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { assertWellFormedXml, svgTexts } from "./svg_xml.ts";
import type { MeasureRow, Mode } from "../measure/measure.ts";
import type { SweepCell } from "../measure/sweep.ts";
import type { ExternalRows } from "./external.ts";
import {
  externalMatches,
  formatSweepCsv,
  SWEEP_CSV_COLUMNS,
  sweepBaseName,
  sweepChartSpec,
  type SweepReport,
  writeSweepData,
  writeSweepReport,
} from "./sweep.ts";

const METHODS = [
  "fused",
  "fused-nosort",
  "fused-nofilter",
  "fused-fb",
  "fused-fb-nofilter",
  "fused-f32grad",
  "liger",
  "chunked",
  "compiled",
  "baseline",
];
const MODES: Mode[] = ["fwd", "bwd", "fwd+bwd"];
const VALUES = [32000, 64000, 128000];
const BETAS = [0.1, 0];

function _row(method: string, beta: number, mode: Mode, x: number, fail: boolean): MeasureRow {
  const base = (METHODS.indexOf(method) + 1) * (x / 32000) * (mode === "fwd" ? 1 : 2);
  const times = [base * 1.1, base, base * 0.9, base * 1.3, base * 1.05];
  const peak = (METHODS.indexOf(method) + 1) * x * 4096;
  return {
    method,
    label: method,
    beta,
    mode,
    peakBytes: fail ? null : peak,
    timeMs: fail ? null : base * 1.05,
    timeSource: "gpu",
    timeMsMin: fail ? null : base * 0.9,
    timeMsMax: fail ? null : base * 1.3,
    timeMsIqr: null,
    wallMsMedian: null,
    reps: 5,
    warmup: 1,
    peakByRole: null,
    stats: null,
    ...(fail
      ? { error: "OOM: needs 30,000 MiB" }
      : { timeMsSamples: times, peakBytesSamples: [peak, peak, peak, peak, peak] }),
  };
}

/** Ten methods × 2 β × 3 modes × 3 values; baseline fails (every mode) at the middle value. */
function _report(): SweepReport {
  const cells: SweepCell[] = [];
  for (const x of VALUES) {
    for (const beta of BETAS) {
      for (const m of METHODS) {
        for (const mode of MODES) {
          const fail = m === "baseline" && x === 64000;
          cells.push({
            x,
            shape: { n: 8192, v: x, d: 2304, dtype: "bf16" },
            row: _row(m, beta, mode, x, fail),
          });
        }
      }
    }
  }
  return {
    env: testReportEnv({
      description: "NVIDIA H200",
      driver: { version: "580.1", name: "NVIDIA H200" },
      git: { commit: "0".repeat(40), dirty: false },
    }),
    over: "v",
    values: VALUES,
    base: { n: 8192, v: 32000, d: 2304, dtype: "bf16" },
    fixture: "cce",
    seed: 0,
    betas: BETAS,
    modes: MODES,
    methods: METHODS.map((name) => ({ name, label: name })),
    reduction: "mean",
    warmup: 1,
    reps: 5,
    timeSource: "gpu",
    complete: true,
    cells,
  };
}

function _external(v: number): ExternalRows {
  return {
    source: `torch_${v}.json`,
    env: { device: "NVIDIA H200", torch: "2.9" },
    shape: { n: 8192, v, d: 2304, dtype: "bf16" },
    fixture: "cce",
    rows: MODES.map((mode) => ({
      method: "torch-baseline",
      beta: 0.1,
      mode,
      timeMs: 10,
      timeMsMin: 9,
      timeMsMax: 12,
      peakBytes: 2 ** 30,
      samplesMs: [9, 10, 12, 10, 11],
      external: true as const,
    })),
  };
}

function _parseCsv(text: string): string[][] {
  return text.trimEnd().split("\r\n").map((line) => {
    const out: string[] = [];
    let cur = "", quoted = false;
    for (let i = 0; i < line.length; i++) {
      const ch = line[i];
      if (quoted) {
        if (ch === '"' && line[i + 1] === '"') (cur += '"', i++);
        else if (ch === '"') quoted = false;
        else cur += ch;
      } else if (ch === '"') quoted = true;
      else if (ch === ",") (out.push(cur), cur = "");
      else cur += ch;
    }
    out.push(cur);
    return out;
  });
}

Deno.test("sweep CSV: every column, one line per method × β × mode × metric × value", () => {
  const r = _report();
  const [head, ...rows] = _parseCsv(formatSweepCsv(r));
  const want = [
    "adapter",
    "n",
    "v",
    "d",
    "dtype",
    "fixture",
    "method",
    "beta",
    "mode",
    "metric",
    "x_name",
    "x_value",
    "p20",
    "p50",
    "p80",
    "min",
    "max",
    "reps",
    "unit",
  ];
  for (const c of want) assert.ok(head.includes(c), `column ${c}`);
  assert.equal(rows.length, METHODS.length * BETAS.length * MODES.length * 2 * VALUES.length);
  const col = (name: string) => head.indexOf(name);
  const keys = new Set(
    rows.map((r) =>
      ["method", "beta", "mode", "metric", "x_value"].map((k) => r[col(k)]).join("|")
    ),
  );
  for (const m of METHODS) {
    for (const b of BETAS) {
      for (const mode of MODES) {
        for (const metric of ["timeMs", "peakBytes"]) {
          for (const x of VALUES) assert.ok(keys.has(`${m}|${b}|${mode}|${metric}|${x}`));
        }
      }
    }
  }
  for (const r of rows) assert.equal(r.length, head.length);
  // figures: percentiles of the samples, units per metric, the swept size in its column
  const t = rows.find((r) =>
    r[col("method")] === "fused" && r[col("mode")] === "fwd" && r[col("metric")] === "timeMs" &&
    r[col("x_value")] === "32000" && r[col("beta")] === "0.1"
  )!;
  assert.deepEqual(
    ["p20", "p50", "p80", "min", "max"].map((k) => Number(t[col(k)]).toFixed(3)),
    ["0.980", "1.050", "1.140", "0.900", "1.300"],
  );
  assert.deepEqual([t[col("unit")], t[col("x_name")], t[col("v")]], ["ms", "v", "32000"]);
  assert.equal(t[col("adapter")], "NVIDIA H200");
  // a failed cell: empty figures and its reason
  const f = rows.filter((r) => r[col("method")] === "baseline" && r[col("x_value")] === "64000");
  assert.equal(f.length, BETAS.length * MODES.length * 2);
  for (const r of f) {
    assert.deepEqual(["p20", "p50", "p80", "min", "max"].map((k) => r[col(k)]), [
      "",
      "",
      "",
      "",
      "",
    ]);
    assert.equal(r[col("error")], "OOM: needs 30,000 MiB");
  }
});

Deno.test("sweep CSV: matching external rows are added, with the swept size", () => {
  const r = { ..._report(), external: [_external(64000)] };
  const [head, ...rows] = _parseCsv(formatSweepCsv(r));
  const ext = rows.filter((x) => x[head.indexOf("method")] === "torch-baseline");
  assert.equal(ext.length, MODES.length * 2);
  assert.ok(ext.every((x) => x[head.indexOf("x_value")] === "64000"));
  const t = ext.find((x) => x[head.indexOf("metric")] === "timeMs")!;
  assert.deepEqual(
    ["p20", "p50", "p80", "min", "max"].map((k) => Number(t[head.indexOf(k)]).toFixed(1)),
    ["9.8", "10.0", "11.2", "9.0", "12.0"],
    "percentiles of torch_peers' samplesMs",
  );
  assert.ok(externalMatches(_external(999), r), "the swept size may differ");
  const other = _external(64000);
  other.shape = { ...other.shape, d: 4096 };
  assert.ok(!externalMatches(other, r), "a fixed size may not");
});

/** The series of every line mark of an SVG, with how many paths each has. */
function _lines(svg: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (
    const m of svg.matchAll(/<path aria-label="([^"]*)"[^>]*aria-roledescription="line mark"/g)
  ) {
    const s = /series: ([^;]*)/.exec(m[1])![1];
    counts.set(s, (counts.get(s) ?? 0) + 1);
  }
  return counts;
}

Deno.test("sweep reports name their engine: file name, CSV column", () => {
  const dawn = _report();
  dawn.env.adapter = {
    ...dawn.env.adapter,
    engine: "dawn",
    engineVersion: "Dawn (npm:webgpu@0.6.2)",
  };
  assert.equal(sweepBaseName(dawn), "sweep_nvidia-h200_dawn_v");
  const csv = formatSweepCsv(dawn).split("\r\n").filter((l) => l !== "");
  const col = SWEEP_CSV_COLUMNS.indexOf("engine");
  assert.ok(col > 0 && csv.length > 1);
  for (const line of csv.slice(1)) assert.equal(line.split(",")[col], "dawn", line);
  assert.equal(formatSweepCsv(_report()).split("\r\n")[1].split(",")[col], "deno");
});

Deno.test("sweep charts: well-formed SVG, one line per method in every panel, a gap for failures", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-report-"));
  try {
    const r = { ..._report(), external: [_external(32000), _external(64000)] };
    const paths = await writeSweepReport(r, dir);
    const base = sweepBaseName(r);
    assert.equal(base, "sweep_nvidia-h200_v");
    assert.deepEqual(readdirSync(dir).sort(), [
      `${base}.csv`,
      `${base}.json`,
      `${base}_memory.svg`,
      `${base}_time.svg`,
    ]);
    const panels = MODES.length * BETAS.length;
    for (const [svgPath, bound] of [[paths.timeSvg!, false], [paths.memorySvg!, true]] as const) {
      const svg = readFileSync(svgPath, "utf8");
      assertWellFormedXml(svg);
      assert.ok(svg.startsWith("<svg"), "an SVG document");
      const lines = _lines(svg);
      for (const m of METHODS) assert.equal(lines.get(m), panels, `${svgPath}: ${m}`);
      assert.equal(lines.get("lower bound"), bound ? panels : undefined);
      // external rows of β = 0.1 only: one line in each β = 0.1 panel
      assert.equal(lines.get("torch-baseline (PyTorch)"), MODES.length);
      const texts = svgTexts(svg);
      for (const m of METHODS) assert.ok(texts.includes(m), `legend names ${m}`);
      assert.ok(texts.includes("fwd+bwd, β = 0.1"));
      // the failed middle value breaks the baseline's line: its path has two pieces (M … M)
      const baseline = [...svg.matchAll(
        /<path aria-label="[^"]*series: baseline;[^"]*"[^>]*aria-roledescription="line mark"[^>]*d="([^"]*)"/g,
      )];
      assert.equal(baseline.length, panels);
      for (const p of baseline) assert.equal(p[1].split("M").length - 1, 2, p[1]);
      const fused = [...svg.matchAll(
        /<path aria-label="[^"]*series: fused;[^"]*"[^>]*aria-roledescription="line mark"[^>]*d="([^"]*)"/g,
      )];
      for (const p of fused) assert.equal(p[1].split("M").length - 1, 1, p[1]);
    }
    const spec = JSON.stringify(sweepChartSpec(r, "peakBytes"));
    assert.match(spec, /"type":"log"/, "memory spanning decades is on a log axis");
    const json = JSON.parse(readFileSync(paths.json, "utf8"));
    assert.equal(json.env.git.commit, "0".repeat(40));
    assert.equal(json.failures.length, BETAS.length * MODES.length);
    assert.deepEqual(json.cells[0].row.timeMsSamples.length, 5);
  } finally {
    if (Deno.env.get("KEEP_SWEEP_TEST")) console.log(dir);
    else rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("writeSweepData: JSON and CSV replaced atomically, no temporary left", () => {
  const dir = mkdtempSync(join(tmpdir(), "sweep-data-"));
  try {
    const r = _report();
    const first = { ...r, cells: r.cells.slice(0, 3), complete: false };
    const p = writeSweepData(first, join(dir, "out"));
    assert.equal(JSON.parse(readFileSync(p.json, "utf8")).cells.length, 3);
    writeSweepData(r, join(dir, "out"));
    assert.equal(JSON.parse(readFileSync(p.json, "utf8")).cells.length, r.cells.length);
    assert.deepEqual(readdirSync(join(dir, "out")).filter((f) => f.includes(".tmp")), []);
    assert.ok(existsSync(p.csv));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
