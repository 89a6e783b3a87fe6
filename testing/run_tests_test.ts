import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../core/errors.ts";
import {
  findEntryPoints,
  findTestFiles,
  heaviestFirst,
  killedBySignal,
  parseSummary,
  runTestFiles,
  totals,
} from "./run_tests.ts";
import { tempDir } from "./temp_dir.ts";

function _tree(root: string, files: Record<string, string>): void {
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), text);
  }
}

Deno.test("run tests: finds test modules as deno test does, not in tools, outputs or hidden folders", async () => {
  const root = await tempDir("run_tests_find_");
  _tree(root, {
    "a_test.ts": "",
    "test.ts": "",
    "b.test.mjs": "",
    "k/x_test.ts": "",
    "k/deep/y_test.js": "",
    "k/contest.ts": "",
    "k/x_test.ts.orig": "",
    "node_modules/m/z_test.ts": "",
    "tools/deno/t_test.ts": "",
    "out/o_test.ts": "",
    ".gpu/g_test.ts": "",
  });
  assert.deepEqual(findTestFiles(root), [
    "a_test.ts",
    "b.test.mjs",
    "k/deep/y_test.js",
    "k/x_test.ts",
    "test.ts",
  ]);
  assert.deepEqual(findTestFiles(root, ["k/"]), ["k/deep/y_test.js", "k/x_test.ts"]);
  assert.deepEqual(findTestFiles(root, ["k/x_test.ts", "a_test.ts"]), ["a_test.ts", "k/x_test.ts"]);
  assert.deepEqual(findTestFiles(root, ["."]).length, 5);
  assert.throws(
    () => findTestFiles(root, ["nope"]),
    (e) => e instanceof InputError && /^nope: no such/.test(e.message),
  );
  assert.throws(
    () => findTestFiles(root, ["k/contest.ts"]),
    (e) => e instanceof InputError && e.message === "no test files in k/contest.ts",
  );
});

Deno.test("run tests: the command lines the tests run, type-checked with them", async () => {
  const root = await tempDir("run_tests_entries_");
  _tree(root, {
    "scripts/b.ts": "",
    "scripts/a.ts": "",
    "scripts/a_test.ts": "",
    "scripts/peers/p.py": "",
    "scripts/peers/q.ts": "",
    "scripts/run.sh": "",
    "bench/gpu_time.ts": "",
    "core/cli.ts": "",
  });
  assert.deepEqual(findEntryPoints(root), ["bench/gpu_time.ts", "scripts/a.ts", "scripts/b.ts"]);
  assert.deepEqual(findEntryPoints(join(root, "core")), []);
});

Deno.test("run tests: heaviest first, files without a time before all, ties in order", () => {
  assert.deepEqual(
    heaviestFirst(["a", "b", "c", "d", "e"], { a: 1, b: 30, c: 2, e: 30 }),
    ["d", "b", "e", "c", "a"],
  );
  assert.deepEqual(heaviestFirst([], { a: 1 }), []);
});

Deno.test("run tests: the summary line's counts, with colour, steps and ignored tests", () => {
  assert.deepEqual(
    parseSummary("running 2 tests\n\n\x1b[32mok\x1b[0m | 12 passed (3 steps) | 0 failed (5s)\n"),
    { passed: 12, failed: 0, ignored: 0 },
  );
  assert.deepEqual(
    parseSummary("x\nFAILED | 3 passed | 2 failed | 11 ignored (1m2s)\n\nerror: Test failed\n"),
    { passed: 3, failed: 2, ignored: 11 },
  );
  assert.equal(parseSummary("error: Module not found\n"), undefined);
  assert.equal(killedBySignal({ code: 134, signal: undefined }), true);
  assert.equal(killedBySignal({ code: 1, signal: "SIGKILL" }), true);
  assert.equal(killedBySignal({ code: 1, signal: undefined }), false);
});

Deno.test("run tests: each file in its own process; failures, load errors and signal deaths counted", async () => {
  const root = await tempDir("run_tests_run_");
  const marker = join(root, "died_once");
  _tree(root, {
    "pass_test.ts": `Deno.test("p1", () => {}); Deno.test("p2", () => {});
      Deno.test({ name: "skip", ignore: true, fn: () => {} });
      Deno.env.set("RUN_TESTS_LEAK", "1");`,
    "env_test.ts":
      `Deno.test("own env", () => { if (Deno.env.get("RUN_TESTS_LEAK")) throw new Error("shared"); });`,
    "fail_test.ts":
      `Deno.test("ok", () => {}); Deno.test("bad", () => { throw new Error("boom"); });`,
    "load_test.ts": `import "./missing.ts";`,
    "once_test.ts": `Deno.test("dies once", () => {
        try { Deno.statSync(${JSON.stringify(marker)}); } catch {
          Deno.writeTextFileSync(${JSON.stringify(marker)}, "");
          Deno.kill(Deno.pid, "SIGKILL");
        }
      });`,
    "always_test.ts": `Deno.test("dies", () => { Deno.kill(Deno.pid, "SIGKILL"); });`,
  });
  const files = findTestFiles(root);
  const ended: string[] = [];
  const runs = await runTestFiles(files, { root, jobs: 3, onDone: (r) => ended.push(r.file) });
  assert.deepEqual(runs.map((r) => r.file), files);
  assert.deepEqual([...ended].sort(), files);
  const by = Object.fromEntries(runs.map((r) => [r.file, r]));
  assert.deepEqual(by["pass_test.ts"].counts, { passed: 2, failed: 0, ignored: 1 });
  assert.equal(by["pass_test.ts"].code, 0);
  assert.equal(by["env_test.ts"].code, 0, by["env_test.ts"].output);
  assert.deepEqual(by["fail_test.ts"].counts, { passed: 1, failed: 1, ignored: 0 });
  assert.match(by["fail_test.ts"].output, /boom/);
  assert.equal(by["fail_test.ts"].attempts, 1, "a failed test is never rerun");
  assert.equal(by["load_test.ts"].counts, undefined);
  assert.notEqual(by["load_test.ts"].code, 0);
  assert.deepEqual([by["once_test.ts"].attempts, by["once_test.ts"].code], [2, 0]);
  assert.equal(by["once_test.ts"].killed?.signal, "SIGKILL");
  assert.equal(by["pass_test.ts"].killed, undefined);
  assert.equal(by["always_test.ts"].attempts, 2);
  assert.equal(killedBySignal(by["always_test.ts"]), true);
  assert.deepEqual(totals(runs), {
    passed: 5,
    failed: 1,
    ignored: 1,
    failedFiles: ["always_test.ts", "fail_test.ts", "load_test.ts"],
  });
  await assert.rejects(runTestFiles(files, { root, jobs: 0 }), RangeError);
});

Deno.test("run tests: an abort stops the running test process and starts no more", async () => {
  const root = await tempDir("run_tests_abort_");
  const slow =
    `Deno.test("slow", async () => { await new Promise((r) => setTimeout(r, 60_000)); });`;
  _tree(root, { "a_test.ts": slow, "b_test.ts": slow });
  const abort = new AbortController();
  const t0 = performance.now();
  setTimeout(() => abort.abort(), 1500);
  const runs = await runTestFiles(["a_test.ts", "b_test.ts"], {
    root,
    jobs: 1,
    signal: abort.signal,
  });
  assert.ok(performance.now() - t0 < 30_000, "the slow test was not waited for");
  assert.deepEqual(runs.map((r) => [r.file, r.attempts, r.signal]), [["a_test.ts", 1, "SIGTERM"]]);
});
