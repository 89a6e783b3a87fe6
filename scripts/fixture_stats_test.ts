import assert from "node:assert/strict";
import { runScript } from "../testing/run_script.ts";

const run = (args: string[]) => runScript("scripts/fixture_stats.ts", args);

Deno.test("fixture_stats: a Markdown table with one row per fixture", async () => {
  const r = await run(["--n", "20", "--v", "300", "--d", "8", "--tile", "16", "--seed", "3"]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, "");
  const lines = r.stdout.trim().split("\n");
  assert.match(lines[0], /n=20, v=300, d=8, bf16, seed 3/);
  const table = lines.filter((l) => l.startsWith("|"));
  assert.match(table[0], /^\| fixture \| mean max p .* 16×16 tiles with every p < 2\^-12 \|$/);
  assert.equal(table[1], "|---|---:|---:|---:|---:|");
  assert.deepEqual(
    table.slice(2).map((l) => l.split("|")[1].trim()),
    ["cce", "llm", "uniform", "nonzero-mean"],
  );
  for (const row of table.slice(2)) {
    const cells = row.split("|").slice(2, -1).map((c) => parseFloat(c));
    assert.equal(cells.length, 4);
    assert.ok(cells.every(Number.isFinite), row);
    assert.ok(cells[0] > 0 && cells[0] <= 1, row);
  }
});

Deno.test("fixture_stats: one fixture, threshold as a number", async () => {
  const r = await run([
    "--fixture",
    "uniform",
    "--n",
    "4",
    "--v",
    "64",
    "--d",
    "4",
    "--threshold",
    "0.5",
  ]);
  assert.equal(r.code, 0, r.stderr);
  const rows = r.stdout.split("\n").filter((l) => l.startsWith("| uniform"));
  assert.equal(rows.length, 1);
  assert.match(rows[0], /\| 100\.0% \|$/); // every p < 0.5 when v = 64 and logits lie in ±2
  assert.match(r.stdout, /every p < 2\^-1 \|/);
});

for (
  const [args, message] of [
    [["--bogus"], /^error: Unknown option '--bogus'/],
    [["--n", "0"], /^error: --n must be a positive integer, got '0'$/],
    [["--n", "3e3"], /^error: --n must be a positive integer, got '3e3'$/],
    [
      ["--fixture", "x"],
      /^error: unknown fixture 'x' \(expected cce, llm, uniform or nonzero-mean\)$/,
    ],
    [["--dtype", "f64"], /^error: unknown dtype 'f64'/],
    [["--threshold", "2"], /^error: --threshold must be in \(0, 1\]/],
    [["extra"], /^error: /],
  ] as const
) {
  Deno.test(`fixture_stats: bad flags ${args.join(" ")} → one line, exit 2`, async () => {
    const r = await run([...args]);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, "");
    assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
    assert.match(r.stderr.trimEnd(), message);
  });
}
