import assert from "node:assert/strict";
import { defineCommand, parseIntValue, parseList, parseNumberValue } from "./cli.ts";
import { InputError } from "./errors.ts";
import { tempDir } from "../testing/temp_dir.ts";

const CMD = defineCommand({
  name: "deno task demo",
  summary: "A demo command.",
  flags: {
    n: { type: "int", help: "tokens", min: 1, default: 16 },
    "ignore-index": { type: "int", help: "ignored target", default: -100 },
    beta: { type: "number", help: "label smoothing", min: 0, max: 1, default: 0.1 },
    lr: { type: "number", help: "learning rate" },
    out: { type: "string", help: "directory", arg: "DIR", default: "reports" },
    reduction: { type: "string", help: "reduction", choices: ["mean", "sum", "none"] },
    quick: { type: "boolean", help: "fewer cases" },
    seed: { type: "int", help: "seed", env: "LCE_DEMO_SEED", default: 0 },
  },
});

function refused(args: string[], want: RegExp) {
  assert.throws(() => CMD.parse(args), (e: unknown) => {
    assert.ok(e instanceof InputError, String(e));
    assert.match(e.message, want);
    assert.doesNotMatch(e.message, /\n/);
    return true;
  }, args.join(" "));
}

Deno.test("cli: typed values, defaults, booleans", () => {
  const p = CMD.parse(["--n", "32", "--beta", "1e-1", "--quick", "--ignore-index", "-3"])!;
  assert.equal(p.values.n, 32);
  assert.equal(p.values.beta, 0.1);
  assert.equal(p.values.quick, true);
  assert.equal(p.values["ignore-index"], -3);
  assert.equal(p.values.out, "reports");
  assert.equal(p.values.lr, undefined);
  assert.equal(p.values.reduction, undefined);
  assert.deepEqual([...p.given].sort(), ["beta", "ignore-index", "n", "quick"]);
  const q = CMD.parse(["--lr=.5", "--reduction", "sum"])!;
  assert.equal(q.values.lr, 0.5);
  assert.equal(q.values.reduction, "sum");
  assert.equal(q.values.quick, false);
  assert.equal(q.values.n, 16);
});

Deno.test("cli: integer and number flags mean exactly what they say", () => {
  refused(["--ignore-index", "2.5"], /^--ignore-index must be an integer, got '2\.5'$/);
  refused(["--n", "3e3"], /^--n must be a positive integer, got '3e3'$/);
  refused(["--n", "0x10"], /^--n must be a positive integer/);
  refused(["--n", "0"], /^--n must be a positive integer, got '0'$/);
  refused(["--n", "12abc"], /^--n must be a positive integer/);
  refused(["--n", "9007199254740993"], /^--n must be a positive integer/);
  refused(["--n", " 5"], /^--n must be a positive integer/);
  refused(["--beta", "0x1"], /^--beta must be a plain decimal number, got '0x1'$/);
  refused(["--beta", "0.1abc"], /^--beta must be a plain decimal number, got '0\.1abc'$/);
  refused(["--beta", "NaN"], /^--beta must be a plain decimal number/);
  refused(["--beta", "Infinity"], /^--beta must be a plain decimal number/);
  refused(["--lr", "1e999"], /^--lr must be a plain decimal number/);
  refused(["--beta", ""], /^--beta must be a plain decimal number/);
  refused(["--beta", "1.5"], /^--beta must be a number in \[0, 1\], got '1\.5'$/);
  refused(["--reduction", "avg"], /^--reduction must be mean, sum or none, got 'avg'$/);
  refused(["--out", ""], /^--out must not be empty$/);
  refused(["--bogus"], /^Unknown option '--bogus'/);
  refused(["--n"], /^Option '--n <value>' argument missing/);
  refused(["--quick=1"], /^Option '--quick' does not take an argument/);
  refused(["stray"], /^Unexpected argument 'stray'/);
  for (const ok of ["0", "-2", "+3", "1.", ".5", "1e-5", "2E+3"]) parseNumberValue("--x", ok);
  assert.equal(parseIntValue("--x", "-100"), -100);
  assert.deepEqual(parseList("--m", "a, b"), ["a", "b"]);
  assert.throws(() => parseList("--m", "a,,b"), /--m has an empty entry/);
  assert.throws(() => parseList("--m", "a,a"), /--m lists an entry twice/);
});

Deno.test("cli: environment fallback names the variable", () => {
  Deno.env.set("LCE_DEMO_SEED", "7");
  try {
    assert.equal(CMD.parse([])!.values.seed, 7);
    assert.equal(CMD.parse(["--seed", "3"])!.values.seed, 3);
    Deno.env.set("LCE_DEMO_SEED", "7.5");
    refused([], /^LCE_DEMO_SEED must be an integer, got '7\.5'$/);
  } finally {
    Deno.env.delete("LCE_DEMO_SEED");
  }
});

Deno.test("cli: --help prints every flag with its default and returns undefined", () => {
  const logged: string[] = [];
  const log = console.log;
  console.log = (s: string) => logged.push(s);
  try {
    assert.equal(CMD.parse(["--n", "5", "--help"]), undefined);
    assert.equal(CMD.parse(["-h"]), undefined);
  } finally {
    console.log = log;
  }
  const text = logged[0];
  assert.match(text, /^usage: \.\/dev task demo \[--n N\] /);
  assert.match(text, /--n N +tokens \(default: 16\)/);
  assert.match(text, /--beta X +label smoothing \(default: 0\.1\)/);
  assert.match(text, /--out DIR +directory \(default: 'reports'\)/);
  assert.match(text, /--quick +fewer cases \(default: off\)/);
  assert.match(text, /--seed N +seed \(default: 0; env LCE_DEMO_SEED\)/);
  assert.match(text, /-h, --help/);
});

Deno.test("cli: runCli exits 2 for bad input, 1 for internal failures, one line, stack only with LCE_DEBUG=1", async () => {
  const dir = await tempDir("cli_test_");
  try {
    const cli = new URL("./cli.ts", import.meta.url).href;
    const errors = new URL("./errors.ts", import.meta.url).href;
    const script = `${dir}/main.ts`;
    await Deno.writeTextFile(
      script,
      `import { runCli } from "${cli}";\nimport { InputError } from "${errors}";\n` +
        `await runCli(async () => {\n  const kind = Deno.args[0];\n` +
        `  if (kind === "input") throw new InputError("--x is bad");\n` +
        `  if (kind === "internal") throw new RangeError("index out of range\\nsecond line");\n` +
        `  if (kind === "rejection") { Promise.reject(new Error("lost")); await new Promise((r) => setTimeout(r, 50)); }\n` +
        `  if (kind === "code") return 3;\n});\n`,
    );
    const run = async (kind: string, debug = false) => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", script, kind],
        stdout: "piped",
        stderr: "piped",
        env: { NO_COLOR: "1", LCE_DEBUG: debug ? "1" : "" },
      }).output();
      return { code: out.code, stderr: new TextDecoder().decode(out.stderr).trimEnd() };
    };
    assert.deepEqual(await run("input"), { code: 2, stderr: "error: --x is bad" });
    assert.deepEqual(await run("internal"), {
      code: 1,
      stderr: "error: RangeError: index out of range",
    });
    assert.deepEqual(await run("rejection"), { code: 1, stderr: "error: Error: lost" });
    assert.deepEqual(await run("code"), { code: 3, stderr: "" });
    assert.deepEqual(await run("ok"), { code: 0, stderr: "" });
    const debug = await run("internal", true);
    assert.equal(debug.code, 1);
    assert.match(debug.stderr, /^error: RangeError: index out of range\n.*\n\s+at /s);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: a repeatable flag gives the list of its values, empty when absent", () => {
  const cmd = defineCommand({
    name: "deno task demo",
    summary: "A demo command.",
    flags: { module: { type: "string", help: "a module", arg: "PATH", multiple: true } },
  });
  const p = cmd.parse(["--module", "a.ts", "--module=b.ts"])!;
  assert.deepEqual(p.values.module, ["a.ts", "b.ts"]);
  assert.ok(p.given.has("module"));
  const q = cmd.parse([])!;
  assert.deepEqual(q.values.module, []);
  assert.ok(!q.given.has("module"));
  assert.match(cmd.usage(), /\[--module PATH\]\.\.\./);
  assert.throws(() => cmd.parse(["--module", ""]), /--module must not be empty/);
});
