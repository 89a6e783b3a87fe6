import assert from "node:assert/strict";
import { runScript } from "../testing/run_script.ts";

/** Every command-line entry point; each declares its flags with core/cli.ts. */
const SCRIPTS = [
  "scripts/table3.ts",
  "scripts/sweep.ts",
  "scripts/lce.ts",
  "scripts/gate.ts",
  "scripts/tune_forward.ts",
  "scripts/calibrate.ts",
  "scripts/beta_curve.ts",
  "scripts/bench_gemm.ts",
  "scripts/bench_tc.ts",
  "scripts/tc_check.ts",
  "scripts/bench_fused_backward.ts",
  "scripts/train_parity.ts",
  "scripts/fixture_stats.ts",
  "scripts/entropy_bound_figure.ts",
  "scripts/fuzz.ts",
  "scripts/gpu_smoke.ts",
  "scripts/table3_merge.ts",
  "scripts/kept_fraction.ts",
  "scripts/engine_probe.ts",
  "scripts/compare.ts",
  "scripts/history.ts",
  "scripts/tests.ts",
  "bench/gpu_time.ts",
];

const _run = (script: string, args: string[]) => runScript(script, args);

Deno.test("every command: --help lists each flag with its default; unknown flags exit 2", async () => {
  for (const script of SCRIPTS) {
    const h = await _run(script, ["--help"]);
    assert.equal(h.code, 0, `${script}: ${h.stderr}`);
    // the usage line runs the command as the README does, through ./dev
    assert.match(h.stdout, /^usage: \.\/dev (task [\w-]+|run -A [\w/]+\.ts) /, script);
    // one entry per flag (a long flag's text is wrapped onto the next line)
    const flags = h.stdout.replace(/\n {10,}/g, " ").split("\n")
      .filter((l) => /^ {2}(-\w, )?--/.test(l));
    assert.ok(flags.length >= 2, `${script}: ${h.stdout}`);
    for (const line of flags.filter((l) => !l.includes("--help"))) {
      assert.match(line, /\((default: .+|required)(; env \w+)?\)$/, `${script}: ${line}`);
    }
    const bad = await _run(script, ["--no-such-flag"]);
    assert.equal(bad.code, 2, `${script}: ${bad.stderr}`);
    const lines = bad.stderr.trimEnd().split("\n").filter((l) => !/Download/.test(l));
    assert.deepEqual(lines.length, 1, `${script}: ${bad.stderr}`);
    assert.match(lines[0], /^error: Unknown option '--no-such-flag'/, script);
  }
});

/** The repository's own .ts files (no tests), as paths from the root. */
function _sources(dir: string, out: string[] = []): string[] {
  const skip = new Set(["node_modules", "tools", "reports", "tmp", ".gpu", ".git"]);
  for (const e of Deno.readDirSync(new URL(`../${dir}`, import.meta.url))) {
    const path = dir === "." ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory && !skip.has(e.name) && !e.name.startsWith(".")) _sources(path, out);
    else if (e.isFile && e.name.endsWith(".ts") && !e.name.endsWith("_test.ts")) out.push(path);
  }
  return out;
}

Deno.test("one command-line spec: parseArgs only in core/cli.ts, every entry point listed", () => {
  const files = _sources(".");
  const read = (p: string) => Deno.readTextFileSync(new URL(`../${p}`, import.meta.url));
  const parsers = files.filter((p) => p !== "core/cli.ts" && /\bparseArgs\b/.test(read(p)));
  assert.deepEqual(parsers, [], "call parseArgs through core/cli.ts's defineCommand");
  const entries = files.filter((p) => /\brunCli\(/.test(read(p)) && p !== "core/cli.ts");
  assert.deepEqual(entries.filter((p) => !SCRIPTS.includes(p)), [], "add them to SCRIPTS");
});
