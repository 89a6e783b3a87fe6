import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { runScript } from "../testing/run_script.ts";
import { tempDir } from "../testing/temp_dir.ts";

/** A table3-like report file with every cell's samples scaled by `k`. */
async function _write(
  dir: string,
  name: string,
  k: number,
  adapter = "llvmpipe",
  passMs?: Record<string, number>,
) {
  const rows = ["fwd", "bwd"].map((mode) => ({
    method: "fused",
    label: "Ours",
    beta: 0.1,
    mode,
    timeMs: 10 * k,
    timeMsSamples: [10, 10.3, 9.8, 10.1].map((x) => x * k),
    ...(passMs ? { passMs } : {}),
  }));
  const r = {
    env: { adapter: { description: adapter, engine: "deno" }, date: "2026-11-25", git: {} },
    shape: { n: 8, v: 16, d: 4, dtype: "bf16" },
    fixture: "cce",
    reduction: "mean",
    rows,
  };
  const path = join(dir, name);
  await Deno.writeTextFile(path, JSON.stringify(r));
  return path;
}

Deno.test("compare command: Markdown on stdout, JSON with --out, exit 1 for a slower cell", async () => {
  const dir = await tempDir("lce_compare_");
  const a = await _write(dir, "a.json", 1), same = await _write(dir, "b.json", 1.01);
  const slow = await _write(dir, "slow.json", 1.5);
  const out = join(dir, "cmp.json");
  const r0 = await runScript("scripts/compare.ts", [a, same, "--out", out]);
  assert.equal(r0.code, 0, r0.stderr);
  assert.match(
    r0.stdout,
    /\| fused \| 0\.1 \| fwd \| 8×16×4 \| bf16 \| cce \| .* \| within noise \|/,
  );
  const json = JSON.parse(await Deno.readTextFile(out));
  assert.equal(json.cells.length, 2);
  assert.equal(json.counts["within noise"], 2);
  const r1 = await runScript("scripts/compare.ts", [a, slow]);
  assert.equal(r1.code, 1, r1.stderr);
  assert.match(r1.stdout, /\*\*slower\*\*/);
  const r2 = await runScript("scripts/compare.ts", [a, slow, "--threshold", "60"]);
  assert.equal(r2.code, 0, "a 50% change is within a 60% threshold");
});

Deno.test("compare command: bad input is one line, exit 2, nothing written", async () => {
  const dir = await tempDir("lce_compare_");
  const a = await _write(dir, "a.json", 1);
  const h100 = await _write(dir, "h.json", 1, "NVIDIA H100");
  const notJson = join(dir, "x.json"), notReport = join(dir, "y.json");
  await Deno.writeTextFile(notJson, "{");
  await Deno.writeTextFile(notReport, '{"rows": 1}');
  const out = join(dir, "out.json");
  const cases: [string[], RegExp][] = [
    [[a], /^error: give two reports, A\.json and B\.json \(got 1\)$/],
    [[a, join(dir, "missing.json")], /missing\.json: cannot read it/],
    [[a, notJson], /x\.json: not JSON/],
    [[a, notReport], /y\.json: not a table3 or sweep report/],
    [[a, h100], /different adapters \(llvmpipe; NVIDIA H100\): give --across adapter/],
    [[a, a, "--threshold", "-1"], /--threshold must be a number in \[0, 1000\]/],
    [[a, a, "--across", "gpu"], /--across must list adapter or engine, got 'gpu'/],
    [[a, a, "--explain-above", "-1"], /--explain-above must be a number in \[0, 1000\]/],
    [[a, a, "--out", dir], /output path is a directory/],
  ];
  for (const [args, re] of cases) {
    const r = await runScript("scripts/compare.ts", ["--out", out, ...args], { trimStderr: true });
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.equal(r.stdout, "");
    assert.ok(!existsSync(out), "nothing written");
  }
  const ok = await runScript("scripts/compare.ts", [a, h100, "--across", "adapter"]);
  assert.equal(ok.code, 0, ok.stderr);
});

Deno.test("compare command: --explain-above lists the passes of cells past it (default 1.15)", async () => {
  const dir = await tempDir("lce_compare_");
  const a = await _write(dir, "a.json", 1, "llvmpipe", { "dC[0]": 4, "dC[1]": 4, stats: 2 });
  const b = await _write(dir, "b.json", 1.3, "llvmpipe", { "dC[0]": 5, "dC[1]": 6, stats: 2.1 });
  const out = join(dir, "cmp.json");
  const r = await runScript("scripts/compare.ts", [a, b, "--out", out]);
  assert.equal(r.code, 1, r.stderr);
  assert.match(
    r.stdout,
    /## Where the difference is \(per pass\)[^]*\*\*fused, β = 0\.1, fwd\*\*[^]*\| dC\[chunk ×2\] \| 8\.00 \| 11\.00 \| 1\.375 \| \+3\.00 \|\n\| stats \|/,
  );
  const json = JSON.parse(await Deno.readTextFile(out));
  assert.equal(json.explainAbove, 1.15);
  assert.deepEqual(json.cells[0].passes.map((p: { pass: string }) => p.pass), [
    "dC[chunk ×2]",
    "stats",
  ]);
  const high = await runScript("scripts/compare.ts", [a, b, "--explain-above", "1.5"]);
  assert.match(high.stdout, /No compared cell's B\/A exceeds 1\.5\./);
  const off = await runScript("scripts/compare.ts", [a, b, "--explain-above", "0"]);
  assert.doesNotMatch(off.stdout, /per pass/);
});
