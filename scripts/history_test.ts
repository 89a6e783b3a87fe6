import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { runScript } from "../testing/run_script.ts";
import { reportCells } from "../measure/compare_cells.ts";
import { upsertHistory } from "../measure/history.ts";
import { tempDir } from "../testing/temp_dir.ts";

function _history(dir: string): string {
  const path = join(dir, "hist.csv");
  for (const [commit, ms, date] of [["a", 2, "2026-11-24"], ["b", 1.5, "2026-11-25"]] as const) {
    upsertHistory(
      path,
      reportCells({
        env: { adapter: { description: "llvmpipe" }, date, git: { commit: commit.repeat(40) } },
        shape: { n: 8, v: 16, d: 4, dtype: "bf16" },
        fixture: "cce",
        reduction: "mean",
        rows: ["fwd", "bwd"].map((mode) => ({
          method: "fused",
          label: "Ours",
          beta: 0.1,
          mode,
          timeMs: ms,
          timeMsSamples: [ms, ms * 1.1, ms * 0.9],
        })),
      }, `${commit}.json`),
    );
  }
  return path;
}

Deno.test("history command: draws a method across commits beside the CSV", async () => {
  const dir = await tempDir("lce_history_");
  const path = _history(dir);
  const r = await runScript("scripts/history.ts", [path, "--method", "fused", "--mode", "fwd"]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /\| aaaaaaaaaaaa \| fwd \| 0\.1 \| 8×16×4 bf16 \| 2\.000 \|/);
  assert.match(r.stdout, /\| bbbbbbbbbbbb \| fwd \| 0\.1 \| 8×16×4 bf16 \| 1\.500 \|/);
  const svg = await Deno.readTextFile(join(dir, "hist_fused.svg"));
  assert.match(svg, /^<svg/);
  assert.match(svg, /fused: time across commits/);
});

Deno.test("history command: bad input is one line, exit 2, nothing written", async () => {
  const dir = await tempDir("lce_history_");
  const path = _history(dir);
  const notHistory = join(dir, "other.csv");
  await Deno.writeTextFile(notHistory, "a,b\r\n1,2\r\n");
  const out = join(dir, "out.svg");
  const cases: [string[], RegExp][] = [
    [["--method", "fused"], /^error: give one history file, FILE\.csv$/],
    [[join(dir, "none.csv"), "--method", "fused"], /none\.csv: no such file$/],
    [[notHistory, "--method", "fused"], /other\.csv: not a history file of this harness/],
    [[path, "--method", "liger"], /no measured row of method 'liger' \(methods there: fused\)$/],
    [[path], /^error: missing --method/],
    [[path, "--method", "fused", "--mode", "up"], /unknown mode 'up'/],
    [[path, "--method", "fused", "--beta", "2"], /--beta must be a number in \[0, 1\]/],
    [[path, "--method", "fused", "--out", dir], /output path is a directory/],
  ];
  for (const [args, re] of cases) {
    const r = await runScript("scripts/history.ts", ["--out", out, ...args], { trimStderr: true });
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.split("\n").length, 1, r.stderr);
    assert.ok(!existsSync(out), "nothing written");
  }
});
