import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { assertWellFormedXml, svgTexts } from "../report/svg_xml.ts";
import { entropyLowerBound } from "./entropy_bound.ts";
import { figure4Data, figure4Svg, hiddenSizeGrid } from "./entropy_figure.ts";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

const SCRIPT = new URL("../scripts/entropy_bound_figure.ts", import.meta.url).pathname;

Deno.test("hiddenSizeGrid is log-spaced, integer, includes both ends", () => {
  const g = hiddenSizeGrid(64, 8192, 8);
  assert.deepEqual(g, [64, 128, 256, 512, 1024, 2048, 4096, 8192]);
  assert.deepEqual(hiddenSizeGrid(1, 3, 10), [1, 2, 3]);
  assert.throws(() => hiddenSizeGrid(0, 10, 5), InputError);
  assert.throws(() => hiddenSizeGrid(10, 5, 5), InputError);
});

Deno.test("figure4Data: gaps in [0, 1], increasing in D, smaller for larger |V|", () => {
  const data = figure4Data({ points: 15 });
  assert.equal(data.series.length, 3);
  for (const s of data.series) {
    let prev = -1;
    for (const p of s.points) {
      assert.ok(p.gap >= 0 && p.gap <= 1);
      assert.ok(p.gap > prev);
      prev = p.gap;
      const b = entropyLowerBound({ rho: 0.1, hiddenSize: p.hiddenSize, vocabSize: s.vocabSize });
      assert.equal(p.bound, b);
    }
  }
  const [v32, v128, v256] = data.series;
  for (let i = 0; i < v32.points.length; i++) {
    assert.ok(v32.points[i].gap >= v128.points[i].gap && v128.points[i].gap >= v256.points[i].gap);
  }
  assert.throws(() => figure4Data({ rho: [0] }), InputError);
  assert.throws(() => figure4Data({ vocabSizes: [1] }), InputError);
});

Deno.test("figure4Svg: well-formed, series labels, axis titles, power-of-two ticks", async () => {
  const data = figure4Data({ rho: [0.1, 0.2], vocabSizes: [32000, 256000], points: 9 });
  const svg = await figure4Svg(data);
  const dir = Deno.env.get("SVG_TEST_OUT");
  if (dir) await Deno.writeTextFile(`${dir}/figure4_two_rho.svg`, svg);
  assertWellFormedXml(svg);
  const texts = svgTexts(svg);
  for (
    const t of [
      "|V| = 32,000, ρ = 0.1",
      "|V| = 256,000, ρ = 0.2",
      "hidden size D",
      "normalised entropy gap",
      "64",
      "1,024",
      "8,192",
    ]
  ) {
    assert.ok(texts.includes(t), `missing ${t}`);
  }
});

const run = (args: string[]) => runScript(SCRIPT, args);

Deno.test("script writes the SVG and JSON atomically into a new folder", async () => {
  const dir = await tempDir("lce_test_");
  try {
    const svgPath = `${dir}/sub/fig4.svg`;
    const r = await run(["--out", svgPath, "--points", "5", "--vocab", "1000,50000"]);
    assert.equal(r.code, 0, r.stderr);
    assertWellFormedXml(await Deno.readTextFile(svgPath));
    const json = JSON.parse(await Deno.readTextFile(`${dir}/sub/fig4.json`));
    assert.equal(json.series.length, 2);
    assert.equal(json.series[1].vocabSize, 50000);
    assert.equal(json.series[0].points.length, 5);
    const left = [...Deno.readDirSync(`${dir}/sub`)].map((e) => e.name).sort();
    assert.deepEqual(left, ["fig4.json", "fig4.svg"]); // no temp files left
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("script: bad flags print one error line and exit 2", async () => {
  for (
    const args of [
      ["--bogus"],
      ["--rho", "abc"],
      ["--rho=-1"],
      ["--vocab", "1"],
      ["--d-min", "100", "--d-max", "10"],
      ["--points", "1.5"],
      ["--out", "x.png"],
      ["positional"],
    ]
  ) {
    const r = await run(args);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    const lines = r.stderr.trim().split("\n");
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^error: /);
  }
});
