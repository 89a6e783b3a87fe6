import assert from "node:assert/strict";
import { join } from "node:path";
import { assertWellFormedXml } from "../report/svg_xml.ts";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

const dir = await tempDir("beta_curve_test_");

const betaCurve = (args: string[]) =>
  runScript("scripts/beta_curve.ts", args, { trimStderr: true });

Deno.test("beta-curve: one row per β from the same start, figure and JSON written", async () => {
  const out = join(dir, "ok");
  const r = await betaCurve([
    ...["--betas", "0.2,0", "--n", "300", "--held-out", "101", "--v", "67", "--d", "19"],
    ...["--steps", "6", "--batch", "64", "--out", out],
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /lowest held-out ECE at β = /);
  const json = JSON.parse(await Deno.readTextFile(join(out, "beta_curve.json")));
  assert.deepEqual(json.rows.map((row: { beta: number | null }) => row.beta), [null, 0, 0.2]);
  assert.equal(json.settings.heldOutTokens, 101);
  for (const row of json.rows) {
    for (const k of ["nll", "ece", "entropy", "temperature", "nllAfter", "eceAfter"]) {
      assert.ok(Number.isFinite(row[k]), `β = ${row.beta}: ${k} = ${row[k]}`);
    }
    // T* minimises the NLL: never above the NLL at T = 1; the gap is the derivative, ≈ 0 there
    assert.ok(row.nllAfter <= row.nll + 1e-9, `β = ${row.beta}`);
    assert.ok(Math.abs(row.entropyGapAfter) < 1e-3, `β = ${row.beta}: ${row.entropyGapAfter}`);
  }
  // training with β > 0 moves the head: its held-out statistics differ from β = 0
  assert.notEqual(json.rows[1].nll, json.rows[2].nll);
  const svg = await Deno.readTextFile(join(out, "beta_curve.svg"));
  assertWellFormedXml(svg);
  assert.match(svg, /ECE \(%\)/);
  assert.match(svg, /NLL \(nats\)/);
});

Deno.test("beta-curve: bad flags get one line, exit 2, nothing written", async () => {
  const out = join(dir, "bad");
  const cases: [string[], RegExp][] = [
    [["--betas", "0,1.5"], /each β must be a number in \[0, 1\], got '1.5'/],
    [["--betas", "0,,0.1"], /each β must be a number/],
    [["--betas", "0.1,0.1"], /repeated value/],
    [["--held-out", "500", "--n", "400"], /--held-out \(500\) must be smaller/],
    [["--lr", "0"], /--lr must be > 0/],
    [["--frobnicate"], /Unknown option/],
    [["--betas", "0,0x1"], /each β must be a number in \[0, 1\], got '0x1'/],
    [["--seed", "3e3"], /--seed must be an integer, got '3e3'/],
    [["--steps", "2.5"], /--steps must be a positive integer, got '2.5'/],
    [["--lr", "0.1abc"], /--lr must be a plain decimal number/],
    [["--adapter", "gpu"], /--adapter must be auto, software or hardware/],
  ];
  for (const [args, re] of cases) {
    const r = await betaCurve([...args, "--out", out]);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.match(r.stderr, re);
  }
  assert.ok(!(await Deno.stat(out).catch(() => undefined)), "nothing written");
});
