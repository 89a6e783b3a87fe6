import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { InputError } from "../core/errors.ts";
import type { MeasureRow, Mode } from "../measure/measure.ts";
import { assertWellFormedXml, svgTexts } from "./svg_xml.ts";
import type { Table3Report } from "./table3.ts";
import { testReportEnv } from "../testing/report_env.ts";
import { BASELINE_PRODUCT_PASS } from "../methods/baseline.ts";
import {
  keptFloors,
  keptFractionMarkdown,
  keptFractionPoints,
  writeKeptFractionReport,
} from "./kept_fraction.ts";

function _row(method: string, mode: Mode, timeMs: number, o: Partial<MeasureRow> = {}): MeasureRow {
  return {
    method,
    label: method,
    beta: 0.1,
    mode,
    peakBytes: 2 ** 20,
    timeMs,
    timeSource: "gpu",
    timeMsMin: timeMs,
    timeMsMax: timeMs,
    timeMsIqr: 0,
    wallMsMedian: timeMs,
    reps: 3,
    warmup: 1,
    peakByRole: null,
    stats: null,
    ...o,
  };
}

/**
 * A report whose fused backward kept `kept` of 1,000 tiles, with P = `p` ms; from 900 kept, an
 * estimate of its filter's sample.
 */
function _report(fixture: string, kept: number, p: number, ours: number): Table3Report {
  const sampled = kept >= 900 ? { filterSampled: 1 } : {};
  const stats = { tilesSkipped: 1000 - kept, tilesTotal: 1000, ...sampled };
  return {
    env: testReportEnv({
      description: "NVIDIA H100 | test",
      driver: { version: "580.1", name: "H100" },
      git: { commit: "0123456789abcdef", dirty: false },
    }),
    shape: { n: 4096, v: 24576, d: 2304, dtype: "bf16" },
    fixture,
    betas: [0.1, 0],
    modes: ["fwd", "bwd", "fwd+bwd"],
    reduction: "mean",
    warmup: 1,
    reps: 3,
    timeSource: "gpu",
    rows: [
      _row("fused", "fwd", 11),
      _row("fused", "bwd", ours - 11, { stats }),
      _row("fused", "fwd+bwd", ours, { stats, check: { ok: kept < 900 } as MeasureRow["check"] }),
      _row("baseline", "fwd", p + 0.5, { passMs: { [BASELINE_PRODUCT_PASS]: p, softmax: 0.5 } }),
      _row("baseline", "bwd", 2 * p),
      _row("baseline", "fwd+bwd", 3 * p),
      // another β's rows are not read
      _row("fused", "fwd+bwd", 1, { beta: 0 }),
    ],
  };
}

Deno.test("kept fraction: k from the fused backward's counts, P from the baseline's product", () => {
  assert.deepEqual(keptFloors(0.5, 10), [35, 30]);
  assert.deepEqual(keptFloors(0.9, 10), [40, 38]);
  const points = keptFractionPoints([
    _report("llm:spread=2", 950, 10, 45),
    _report("llm", 385, 10.2, 50),
  ]);
  assert.deepEqual(points.map((p) => p.fixture), ["llm", "llm:spread=2"]);
  const [a, b] = points;
  assert.equal(a.k, 0.385);
  assert.equal(a.pMs, 10.2);
  assert.ok(Math.abs(a.floorMs - (2 + 3 * 0.385) * 10.2) < 1e-9);
  assert.ok(Math.abs(a.aimMs - 2.77 * 10.2) < 1e-9);
  assert.equal(b.floorMs, 40);
  assert.deepEqual(a.times.fused, { fwd: 11, bwd: 39, fwdBwd: 50, ok: true });
  assert.equal(b.times.fused.ok, false);
  assert.equal(a.times.baseline.fwdBwd, 3 * 10.2);
  assert.equal(a.commit, "0123456");
  const md = keptFractionMarkdown(_report("llm", 385, 10.2, 50), points);
  assert.match(
    md,
    /\| llm \| 0\.385 \| 10\.2 \| 32\.2 \| 28\.3 \| 50\.0 \(1\.55\) \| 30\.6 \(0\.95\) \|/,
  );
  assert.match(md, /\| llm:spread=2 \| ≈0\.950 \| 10\.0 \| 40\.0 \| 39\.0 \| 45\.0 \(1\.13\) ✗ \|/);
  assert.deepEqual(points.map((p) => p.sampled), [false, true]);
  assert.match(md, /\(commit 0123456\), /);
  const later = { ...points[1], commit: "89abcde" };
  assert.match(
    keptFractionMarkdown(_report("llm", 385, 10.2, 50), [points[0], later]),
    /\(commits 0123456, 89abcde\), /,
  );
});

Deno.test("kept fraction: reports that cannot be read side by side are refused by name", () => {
  const other = _report("llm:spread=1", 500, 10, 50);
  other.shape = { ...other.shape, n: 8192 };
  assert.throws(
    () => keptFractionPoints([_report("llm", 385, 10, 50), other]),
    (e) =>
      e instanceof InputError && /fixture llm:spread=1: shape or adapter differs/.test(e.message),
  );
  const noBaseline = _report("llm", 385, 10, 50);
  noBaseline.rows = noBaseline.rows.filter((r) => r.method !== "baseline");
  assert.throws(() => keptFractionPoints([noBaseline]), /no baseline forward with its 'logits/);
  const noFilter = _report("llm", 385, 10, 50);
  noFilter.rows = noFilter.rows.filter((r) => r.method !== "fused");
  assert.throws(() => keptFractionPoints([noFilter]), /no fused backward with its filter counts/);
  assert.throws(() => keptFractionPoints([]), /no reports/);
});

Deno.test("kept fraction: the three files, the chart with the floor and aim lines", async () => {
  const dir = mkdtempSync(join(tmpdir(), "kept-"));
  try {
    const paths = await writeKeptFractionReport([
      _report("llm", 385, 10, 50),
      _report("llm:spread=3", 990, 10, 48),
    ], dir);
    assert.deepEqual(readdirSync(dir).sort(), [
      "kept_fraction_nvidia-h100-test_4096x24576x2304_bf16.json",
      "kept_fraction_nvidia-h100-test_4096x24576x2304_bf16.md",
      "kept_fraction_nvidia-h100-test_4096x24576x2304_bf16.svg",
    ]);
    const json = JSON.parse(readFileSync(paths.json, "utf8"));
    assert.equal(json.points.length, 2);
    assert.equal(json.beta, 0.1);
    const svg = readFileSync(paths.svg, "utf8");
    assertWellFormedXml(svg);
    const texts = svgTexts(svg);
    for (const t of ["fused", "baseline", "floor min((2 + 3k)·P, 4·P)", "aim (2 + 2k)·P"]) {
      assert.ok(texts.includes(t), `legend ${t}: ${texts.join(" | ")}`);
    }
  } finally {
    rmSync(dir, { recursive: true });
  }
});
