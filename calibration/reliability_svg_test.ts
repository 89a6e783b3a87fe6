import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { assertWellFormedXml, svgTexts } from "../report/svg_xml.ts";
import { calibrationMetrics } from "./metrics.ts";
import { eceSummary, reliabilityDiagram } from "./reliability_svg.ts";

/** Writes the SVG under $SVG_TEST_OUT when set, to look at the pictures of the tests. */
async function save(name: string, svg: string): Promise<void> {
  const dir = Deno.env.get("SVG_TEST_OUT");
  if (dir) await Deno.writeTextFile(`${dir}/${name}.svg`, svg);
}

/** Synthetic tokens: accuracy = confidence^power (power 1 is calibrated, > 1 over-confident). */
function synthetic(power: number, n = 5000, seed = 1) {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const confidence: number[] = [];
  const correct: number[] = [];
  for (let i = 0; i < n; i++) {
    const c = 0.05 + 0.95 * Math.sqrt(rand());
    confidence.push(c);
    correct.push(rand() < c ** power ? 1 : 0);
  }
  return calibrationMetrics({ confidence, correct });
}

Deno.test("reliability diagram with two series: well-formed, labels and ECE in the title", async () => {
  const a = { label: "β = 0", report: synthetic(2) };
  const b = { label: "β = 0.1 <LS & cap>", report: synthetic(1, 5000, 2) };
  const svg = await reliabilityDiagram({ series: [a, b], title: "Llama <test>" });
  await save("reliability_two_series", svg);
  assertWellFormedXml(svg);
  const texts = svgTexts(svg);
  assert.ok(texts.includes("Llama <test>"));
  assert.ok(texts.includes(eceSummary(a)) && texts.includes(eceSummary(b)));
  assert.ok(eceSummary(a).startsWith("β = 0: ECE "));
  assert.ok(texts.some((t) => t.startsWith("β = 0.1 <LS & cap> (ECE ")), "legend label");
  for (const t of ["accuracy", "confidence (max softmax probability)", "share of tokens"]) {
    assert.ok(texts.includes(t), `missing ${t}`);
  }
  assert.ok(a.report.ece > b.report.ece);
});

Deno.test("reliability diagram rejects mismatched bins and duplicate labels", async () => {
  const r15 = synthetic(1);
  const r10 = calibrationMetrics({ confidence: [0.5], correct: [1] }, { bins: 10 });
  await assert.rejects(
    () =>
      reliabilityDiagram({ series: [{ label: "a", report: r15 }, { label: "b", report: r10 }] }),
    InputError,
  );
  await assert.rejects(
    () =>
      reliabilityDiagram({ series: [{ label: "a", report: r15 }, { label: "a", report: r15 }] }),
    InputError,
  );
  await assert.rejects(() => reliabilityDiagram({ series: [] }), InputError);
});
