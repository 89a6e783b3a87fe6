import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { groupedBarChart, groupedBarChartSpec, lineChart, logTicks } from "./svg.ts";
import { assertWellFormedXml, svgTexts } from "./svg_xml.ts";

/** Writes the SVG under $SVG_TEST_OUT when set, to look at the pictures of the tests. */
async function save(name: string, svg: string): Promise<void> {
  const dir = Deno.env.get("SVG_TEST_OUT");
  if (dir) await Deno.writeTextFile(`${dir}/${name}.svg`, svg);
}

Deno.test("logTicks: decades, thinning and 1-2-5 inside one decade", () => {
  assert.deepEqual(logTicks(3, 4000), [1, 10, 100, 1000, 10000]);
  assert.deepEqual(logTicks(0.002, 0.5), [0.001, 0.01, 0.1, 1]);
  assert.deepEqual(logTicks(100, 100), [100, 200, 500, 1000]);
  assert.deepEqual(logTicks(20, 80), [10, 20, 50, 100]);
  const wide = logTicks(1e-10, 1e20);
  assert.ok(wide.length <= 13 && wide[0] === 1e-10 && wide.at(-1)! >= 1e20);
  assert.throws(() => logTicks(0, 1), InputError);
});

Deno.test("lineChart: well-formed, labels, axis titles, decade ticks on log axes", async () => {
  const steps = Array.from({ length: 100 }, (_, i) => i + 1);
  const svg = await lineChart({
    title: 'Training loss <β & "smoothing">',
    subtitle: "log–log",
    xLabel: "step",
    yLabel: "loss (nats)",
    logX: true,
    logY: true,
    legendTitle: "run",
    series: [
      { label: "β = 0", x: steps, y: steps.map((s) => 10 / s) },
      { label: "β = 0.1 & 'cap' <30>", x: steps, y: steps.map((s) => 20 / s + 0.01) },
    ],
  });
  await save("line_loglog", svg);
  assertWellFormedXml(svg);
  assert.ok(svg.startsWith("<svg"));
  assert.ok(svg.includes("&lt;30&gt;") && svg.includes("&amp;"));
  const texts = svgTexts(svg);
  for (const t of ["β = 0", "β = 0.1 & 'cap' <30>", "step", "loss (nats)", "run"]) {
    assert.ok(texts.includes(t), `missing text ${t}`);
  }
  assert.ok(texts.includes('Training loss <β & "smoothing">'));
  // x from 1 to 100: decades 1, 10, 100; y from 0.1 to 20.01: 0.1 … 100.
  for (const t of ["1", "10", "100", "0.1"]) assert.ok(texts.includes(t), `missing tick ${t}`);
  assert.ok(!texts.includes("20") && !texts.includes("50"), "non-decade tick on a log axis");
});

Deno.test("lineChart: linear axes, gaps for NaN, input errors", async () => {
  const svg = await lineChart({
    xLabel: "x",
    yLabel: "y",
    series: [{ label: "a", x: [0, 1, 2, 3], y: [0, NaN, 4, 9] }],
    rules: [{ x1: 0, y1: 0, x2: 3, y2: 9 }],
  });
  await save("line_linear", svg);
  assertWellFormedXml(svg);
  await assert.rejects(
    () =>
      lineChart({ xLabel: "x", yLabel: "y", logY: true, series: [{ label: "a", x: [1], y: [0] }] }),
    InputError,
  );
  await assert.rejects(
    () =>
      lineChart({
        xLabel: "x",
        yLabel: "y",
        series: [{ label: "a", x: [1], y: [1] }, { label: "a", x: [1], y: [1] }],
      }),
    InputError,
  );
  await assert.rejects(() => lineChart({ xLabel: "x", yLabel: "y", series: [] }), InputError);
});

Deno.test("groupedBarChart: facets, log memory axis, missing bars with a note", async () => {
  const bars = [];
  for (const mode of ["fwd", "bwd", "fwd+bwd"]) {
    for (const beta of ["β = 0", "β = 0.1"]) {
      for (const [m, mib] of [["torch", 24000], ["cce <ours>", 60], ["liger", 1500]] as const) {
        const oom = m === "torch" && mode === "fwd+bwd" && beta === "β = 0.1";
        bars.push({
          facet: mode,
          group: beta,
          series: m,
          value: oom ? null : mib,
          note: oom ? "OOM" : undefined,
        });
      }
    }
  }
  const svg = await groupedBarChart({
    title: "Peak memory",
    bars,
    valueLabel: "memory (MiB)",
    logY: true,
    facetLabel: "mode",
    seriesLabel: "method",
    valueFormat: ".3~s",
  });
  await save("bars_memory_log", svg);
  assertWellFormedXml(svg);
  const texts = svgTexts(svg);
  for (
    const t of ["fwd", "bwd", "fwd+bwd", "β = 0", "β = 0.1", "torch", "cce <ours>", "liger", "OOM"]
  ) {
    assert.ok(texts.includes(t), `missing text ${t}`);
  }
  assert.ok(texts.includes("memory (MiB)") && texts.includes("method"));
  // Decade ticks 10 … 100k on the log axis (SI-formatted).
  for (const t of ["10", "100", "1k", "10k", "100k"]) assert.ok(texts.includes(t), `tick ${t}`);

  const lin = await groupedBarChart({
    bars: [{ group: "a", series: "x", value: 1.5 }, { group: "a", series: "y", value: 2 }],
    valueLabel: "time (ms)",
  });
  await save("bars_linear", lin);
  assertWellFormedXml(lin);
  assert.ok(svgTexts(lin).includes("time (ms)"));
  await assert.rejects(
    () =>
      groupedBarChart({
        bars: [{ group: "a", series: "x", value: 0 }],
        valueLabel: "m",
        logY: true,
      }),
    InputError,
  );
});

Deno.test("groupedBarChart: on a log axis a bar at the smallest decade stays visible", () => {
  const bars = [
    { facet: "bwd", group: "β = 0.1", series: "fused-fb", value: 1.0 },
    { facet: "bwd", group: "β = 0.1", series: "baseline", value: 480 },
  ];
  const spec = groupedBarChartSpec({ title: "t", bars, valueLabel: "ms", logY: true });
  const text = JSON.stringify(spec);
  // the axis starts a decade below the 1.0 ms bar, so the bar has height
  assert.match(text, /"domain":\[0\.1,1000\]/);
});
