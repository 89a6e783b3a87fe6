import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { GATE_THRESHOLDS, type GateResult, type GateRun } from "../measure/gate_suites.ts";
import { formatBaseline, readBaseline } from "../measure/gate_baseline.ts";
import { writeAtomic } from "../io/outputs.ts";
import { readUntil, runScript, spawnScript } from "../testing/run_script.ts";
import { engineFromEnv } from "../gpu/engine.ts";

const SCRIPT = new URL("./gate.ts", import.meta.url).pathname;
/** The engine the gate runs on in these tests: the suite's (LCE_WEBGPU), which the script inherits. */
const ENGINE = engineFromEnv();

const _run = (args: string[]) => runScript(SCRIPT, args);

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

/** A complete tiny-suite run of the baseline method (not measured: for bad-input cases). */
function _tinyRun(o: Partial<GateResult> = {}): GateRun {
  const mode = { peakBytes: 4096, timeRatio: 1.5, ratios: [1.5], timeMs: 2.5 };
  return {
    version: 1,
    suite: "tiny",
    adapter: { slug: "s", description: "d", isFallbackAdapter: true, timeSource: "cpu" },
    env: { deno: "2.9.6", os: "linux", date: "2026-01-01T00:00:00Z" },
    rounds: 10,
    thresholds: GATE_THRESHOLDS,
    results: [{
      fixture: "cce",
      n: 24,
      v: 130,
      d: 16,
      dtype: "bf16",
      method: "baseline",
      beta: 0.1,
      parity: { loss: 0, dE: 0, dC: 0 },
      yardstickMs: 1,
      modes: { fwd: mode, bwd: mode, "fwd+bwd": mode },
      ...o,
    }],
  };
}

Deno.test("gate script: bad flags and bad baselines exit 2 with one line", async () => {
  const dir = mkdtempSync(join(tmpdir(), "gate-flags-"));
  try {
    const notJson = join(dir, "bad.json");
    writeFileSync(notJson, "{");
    const other = join(dir, "other.json");
    writeFileSync(other, JSON.stringify({ version: 2 }));
    // a real tiny baseline, but measured at another n: nothing in common with this run
    const anotherN = join(dir, "another_n.json");
    writeFileSync(anotherN, formatBaseline(_tinyRun({ n: 25 })));
    const onlyMethod = join(dir, "only_method.json");
    writeFileSync(onlyMethod, JSON.stringify({ ..._tinyRun(), results: [{ method: "baseline" }] }));
    const noModes = join(dir, "no_modes.json");
    const nm = _tinyRun();
    delete (nm.results[0] as Partial<GateResult>).modes;
    writeFileSync(noModes, JSON.stringify(nm));
    assert.throws(() => readBaseline(other), /other\.json: version must be 1, got 2/);
    const cases: [string[], RegExp][] = [
      [["--suite", "huge"], /^error: unknown suite 'huge' \(expected ci or tiny\)/],
      [["--methods", "nope"], /^error: unknown method 'nope'/],
      [["--methods", "baseline,,fused"], /^error: --methods has an empty entry/],
      [["--rounds", "0"], /^error: --rounds must be a positive integer/],
      [["--adapter", "cpu"], /^error: --adapter must be auto, software or hardware/],
      [["--baseline", join(dir, "missing.json")], /^error: cannot read baseline .*missing\.json/],
      [["--baseline", notJson], /^error: baseline .*bad\.json is not JSON/],
      [["--baseline", other], /^error: baseline .*other\.json: version must be 1, got 2$/],
      [
        ["--webgpu", "metal"],
        /^error: --webgpu must be deno, dawn or dawn-unchecked, got 'metal'$/,
      ],
      [
        ["--suite", "tiny", "--methods", "baseline", "--baseline", anotherN],
        /^error: the run and the baseline have no result in common, so nothing can be compared: run 1 \(e\.g\. cce 24x130x16 bf16 baseline β=0\.1\), baseline 1 \(e\.g\. cce 25x130x16/,
      ],
      [["--baseline", onlyMethod], /^error: baseline .*: results\[0\]\.fixture is missing/],
      [["--baseline", noModes], /^error: baseline .*: results\[0\]\.modes is missing/],
      [["--out", dir], /^error: .*: output path is a directory$/],
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
      assert.match(same.stdout, /\ngate: passed: memory, parity and time of 1 result\n$/);
      assert.equal(readBaseline(out).rounds, 5);
      assert.match(b.adapter.driver ?? "", /^Mesa \d/, "the baseline records the driver");
      assert.equal(b.adapter.engine, ENGINE);

      // the same baseline as from another CPU: memory and parity compared, time not, said so
      const otherHost = join(dir, "other_host.json");
      writeFileSync(otherHost, formatBaseline({ ...b, adapter: { ...b.adapter, host: "CPU X" } }));
      const o = await _run(["--suite", "tiny", "--methods", "baseline", "--baseline", otherHost]);
      assert.equal(o.code, 0, o.stdout + o.stderr);
      assert.match(
        o.stdout,
        new RegExp(
          "\\ngate: passed: memory and parity of 1 result; time not compared: baseline from CPU X " +
            `\\(Mesa [^,]+, ${ENGINE}\\), this host .+ \\(Mesa [^,]+, ${ENGINE}\\)\\n$`,
        ),
      );

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
      assert.match(bad.stdout, /\| time +\| .* \| fwd\+bwd \| .* rounds slower than it/);
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

Deno.test({
  name: "gate script: --update keeps one baseline per host beside the others, chosen by host",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const cwd = mkdtempSync(join(tmpdir(), "gate-hosts-"));
    const run = (args: string[]) => runScript(SCRIPT, args, { cwd });
    const common = ["--suite", "tiny", "--methods", "baseline", "--rounds", "2"];
    try {
      const none = await run(common);
      assert.equal(none.code, 2, none.stderr);
      assert.match(none.stderr, /^error: no gate baseline of suite 'tiny' in reports\/ for /);
      // another host's baseline already there (another CPU): it stays, this host's is added
      const up = await run([...common, "--update"]);
      assert.equal(up.code, 0, up.stderr);
      const [own] = readdirSync(join(cwd, "reports"));
      assert.match(own, new RegExp(`^gate_baseline_[a-z0-9-]+_${ENGINE}_mesa-[a-z0-9-]+\\.json$`));
      const b = readBaseline(join(cwd, "reports", own));
      const otherName = "gate_baseline_other-host.json";
      writeFileSync(
        join(cwd, "reports", otherName),
        formatBaseline({ ...b, adapter: { ...b.adapter, host: "CPU X" } }),
      );
      const again = await run([...common, "--update"]);
      assert.equal(again.code, 0, again.stderr);
      assert.deepEqual(readdirSync(join(cwd, "reports")).sort(), [otherName, own].sort());
      // this host's is chosen (time gated); without it, the other one (time not compared)
      const gated = await run(common);
      assert.equal(gated.code, 0, gated.stdout + gated.stderr);
      assert.match(gated.stdout, new RegExp(`^# Gate: reports/${own}`));
      assert.match(gated.stdout, /\ngate: passed: memory, parity and time of 1 result\n$/);
      rmSync(join(cwd, "reports", own));
      const other = await run(common);
      assert.equal(other.code, 0, other.stdout + other.stderr);
      assert.match(other.stdout, new RegExp(`^# Gate: reports/${otherName}`));
      assert.match(other.stdout, /time not compared: baseline from CPU X /);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  },
});
