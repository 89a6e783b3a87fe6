import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import type { GateRun } from "../measure/gate_suites.ts";
import type { Table3Env } from "../report/table3.ts";
import { adapterSlug, baselinePath, formatBaseline, readBaseline } from "./gate.ts";
import { writeAtomic } from "../io/outputs.ts";
import { readUntil, runScript, spawnScript } from "../testing/run_script.ts";

const SCRIPT = new URL("./gate.ts", import.meta.url).pathname;

const _run = (args: string[]) => runScript(SCRIPT, args);

Deno.test("gate script: adapter slug and baseline path follow the report names", () => {
  const env = {
    adapter: { description: "llvmpipe (LLVM 15.0.6, 256 bits)" },
  } as unknown as Table3Env;
  assert.equal(adapterSlug(env), "llvmpipe-llvm-15-0-6-256-bits");
  assert.equal(
    baselinePath("llvmpipe-llvm-15-0-6-256-bits"),
    join("reports", "gate_baseline_llvmpipe-llvm-15-0-6-256-bits.json"),
  );
});

Deno.test("gate script: baseline JSON keeps each list of ratios on one line", () => {
  const mode = { peakBytes: 4096, timeRatio: 1.5, ratios: [1.5, 2e-7, 1.25, -3], timeMs: 2.5 };
  const run = {
    version: 1,
    suite: "ci",
    adapter: { slug: "s", description: "d", isFallbackAdapter: true, timeSource: "cpu" },
    env: { deno: "2.9.6", os: "linux", date: "2026-01-01T00:00:00Z" },
    rounds: 14,
    thresholds: { timeThreshold: 1.5 },
    results: [{ method: "m", modes: { fwd: mode, bwd: { ...mode, ratios: [] } } }],
  } as unknown as GateRun;
  const text = formatBaseline(run);
  assert.deepEqual(JSON.parse(text), run);
  assert.match(text, /\n {5}"ratios": \[1\.5, 2e-7, 1\.25, -3\],\n/);
  assert.match(text, /"ratios": \[\],/);
  assert.ok(text.endsWith("}\n"));
});

Deno.test("gate script: atomic write replaces the file and leaves no temporary", () => {
  const dir = mkdtempSync(join(tmpdir(), "gate-write-"));
  try {
    const p = join(dir, "sub", "b.json");
    writeAtomic(p, "one");
    writeAtomic(p, "two");
    assert.equal(readFileSync(p, "utf8"), "two");
    assert.deepEqual(readdirSync(join(dir, "sub")), ["b.json"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("gate script: bad flags and bad baselines exit 2 with one line", async () => {
  const dir = mkdtempSync(join(tmpdir(), "gate-flags-"));
  try {
    const notJson = join(dir, "bad.json");
    writeFileSync(notJson, "{");
    const other = join(dir, "other.json");
    writeFileSync(other, JSON.stringify({ version: 2 }));
    assert.throws(() => readBaseline(other), /is not a gate baseline/);
    const cases: [string[], RegExp][] = [
      [["--suite", "huge"], /^error: unknown suite 'huge' \(expected ci or tiny\)/],
      [["--methods", "nope"], /^error: unknown method 'nope'/],
      [["--methods", "baseline,,fused"], /^error: --methods has an empty entry/],
      [["--rounds", "0"], /^error: --rounds must be a positive integer/],
      [["--adapter", "cpu"], /^error: --adapter must be auto, software or hardware/],
      [["--baseline", join(dir, "missing.json")], /^error: cannot read baseline .*missing\.json/],
      [["--baseline", notJson], /^error: baseline .*bad\.json is not JSON/],
      [["--baseline", other], /^error: baseline .*other\.json is not a gate baseline/],
      [["--bogus"], /^error: Unknown option '--bogus'/],
      [["extra"], /^error: Unexpected argument 'extra'/],
    ];
    for (const [args, want] of cases) {
      const r = await _run(args);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      const lines = r.stderr.trimEnd().split("\n");
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], want);
      assert.equal(r.stdout, "");
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test({
  name: "gate script: --update writes a baseline, the same tree passes, a tampered one fails",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = mkdtempSync(join(tmpdir(), "gate-e2e-"));
    try {
      const file = join(dir, "baseline.json");
      const common = ["--suite", "tiny", "--methods", "baseline", "--baseline", file];
      const up = await _run([...common, "--update"]);
      assert.equal(up.code, 0, up.stderr);
      assert.match(up.stdout, /gate: wrote .*baseline\.json \(1 results\)/);
      assert.deepEqual(readdirSync(dir), ["baseline.json"]);
      const b: GateRun = JSON.parse(readFileSync(file, "utf8"));
      assert.equal(b.suite, "tiny");
      assert.equal(b.rounds, 10); // twice the suite's 5
      assert.equal(b.results.length, 1);
      const r0 = b.results[0];
      assert.deepEqual([r0.method, r0.fixture, r0.beta], ["baseline", "cce", 0.1]);
      assert.deepEqual(Object.keys(r0.modes), ["fwd", "bwd", "fwd+bwd"]);
      assert.ok(r0.parity!.dE < 1e-5, JSON.stringify(r0.parity));

      const out = join(dir, "run.json");
      const same = await _run([...common, "--out", out]);
      assert.equal(same.code, 0, same.stdout + same.stderr);
      assert.match(same.stdout, /^# Gate: .*baseline\.json/);
      assert.match(same.stdout, /\| baseline +\| 1 +\| .* \| ok +\|/);
      assert.match(same.stdout, /gate: passed \(1 results\)/);
      assert.equal(readBaseline(out).rounds, 5);

      // a regressed tree, seen from this baseline: edit the baseline the other way round (less
      // memory, a faster fwd+bwd); parity cannot be planted this way (the 1e-5 floor), see
      // measure/gate_test.ts
      r0.modes.fwd!.peakBytes! -= 16;
      r0.modes["fwd+bwd"]!.timeRatio! /= 3;
      r0.modes["fwd+bwd"]!.ratios = r0.modes["fwd+bwd"]!.ratios.map((x) => x / 3);
      writeFileSync(file, JSON.stringify(b));
      const bad = await _run(common);
      assert.equal(bad.code, 1, bad.stdout + bad.stderr);
      assert.match(bad.stdout, /REGRESSIONS \(2\):/);
      assert.match(
        bad.stdout,
        /\| memory \| cce 24x130x16 bf16 baseline β=0\.1 \| fwd +\| \d+ +\| \d+ +\| \+16 bytes/,
      );
      assert.match(bad.stdout, /\| time +\| .* \| fwd\+bwd \| .* rounds above 1×/);
      assert.match(bad.stdout, /gate: FAILED \(2 regressions\)/);
      assert.match(bad.stderr, /time regressed: measuring cce 24x130x16 bf16 baseline β=0\.1/);
      assert.ok(existsSync(file));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
});

Deno.test({
  name: "gate script: a killed --update leaves its partial run; --resume completes it",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = mkdtempSync(join(tmpdir(), "gate-resume-"));
    try {
      const methods = ["--methods", "baseline,chunked,compiled"];
      const common = ["--suite", "tiny", "--rounds", "1", "--update", ...methods];
      const whole = join(dir, "whole.json"), file = join(dir, "baseline.json");
      const w = await _run([...common, "--baseline", whole]);
      assert.equal(w.code, 0, w.stderr);
      const want: GateRun = JSON.parse(readFileSync(whole, "utf8"));
      assert.equal(want.complete, true);

      const child = spawnScript(SCRIPT, [...common, "--baseline", file], "stderr");
      await readUntil(child, "stderr", (text) => /^gate: \[1\/3\]/m.test(text));
      assert.ok(!existsSync(file), "no baseline written by the killed run");
      const partial: GateRun = JSON.parse(readFileSync(`${file}.partial`, "utf8"));
      assert.equal(partial.complete, false);
      const k = partial.results.length;
      assert.ok(k >= 1 && k < 3, `${k} results`);
      assert.throws(
        () => readBaseline(`${file}.partial`),
        /partial file of an interrupted --update/,
      );

      const other = await _run([
        "--suite",
        "tiny",
        "--rounds",
        "2",
        "--update",
        ...methods,
        "--baseline",
        file,
        "--resume",
        `${file}.partial`,
      ]);
      assert.equal(other.code, 2, other.stderr);
      assert.match(other.stderr, /^error: --resume .*: rounds 2 in the file, 4 asked\n$/);

      const r = await _run([...common, "--baseline", file, "--resume", `${file}.partial`]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal((r.stderr.match(/^gate: \[\d\/3\]/gm) ?? []).length, 3 - k, r.stderr);
      const got = readBaseline(file);
      assert.equal(got.complete, true);
      assert.ok(!existsSync(`${file}.partial`));
      assert.deepEqual(got.results[0], partial.results[0], "kept as measured");
      const cells = (x: GateRun) =>
        x.results.map((r) => ({
          key: `${r.method} ${r.beta}`,
          parity: r.parity,
          peaks: Object.values(r.modes).map((m) => m!.peakBytes),
          error: r.error,
        }));
      assert.deepEqual(cells(got), cells(want), "memory and parity as an uninterrupted run");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
});
