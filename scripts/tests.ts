/**
 * `deno task test [PATH...] [--jobs N] [--filter TEXT] [--record FILE]`: the project's tests,
 * every test file in a `deno test` process of its own, N at a time, the heaviest first
 * (testing/run_tests.ts). The test files and the command lines they run are type-checked once
 * before any test runs. Each file's output is printed whole when it ends; the last line sums them
 * as `deno test` does. Exit 0 when every file passed, 1 otherwise (a failed test, a file that did
 * not load, a process killed twice), 2 for bad input.
 *
 * The order comes from testing/test_seconds.json, each file's seconds in an earlier run on a
 * machine without a GPU; `--record` writes this run's seconds in that form. (The file is named
 * tests.ts because `deno test` takes a file named test.ts for a test module.)
 * @module
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineCommand, runCli } from "../core/cli.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import {
  type FileRun,
  findEntryPoints,
  findTestFiles,
  heaviestFirst,
  runTestFiles,
  totals,
} from "../testing/run_tests.ts";

const _ROOT = fileURLToPath(new URL("..", import.meta.url));
const _SECONDS = fileURLToPath(new URL("../testing/test_seconds.json", import.meta.url));

/** The command line of `test`. */
export const TEST_COMMAND = defineCommand({
  name: "deno task test",
  summary: "Runs the project's tests (or those under PATH), each test file in a deno test " +
    "process of its own, N at a time, heaviest first; the tree is type-checked once first.",
  positionals: "[PATH...]",
  flags: {
    jobs: {
      type: "int",
      min: 1,
      help: "test processes at a time",
      env: "LCE_TEST_JOBS",
      defaultText: "the CPU count",
    },
    filter: { type: "string", arg: "TEXT", help: "only tests whose name contains TEXT" },
    record: {
      type: "string",
      arg: "FILE",
      help: "write each file's seconds here (the form of testing/test_seconds.json)",
    },
  },
});

function _seconds(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(_SECONDS, "utf8"));
  } catch {
    return {}; // no hints: every file counts as heaviest, in name order
  }
}

function _fmt(s: number): string {
  const r = Math.round(s);
  return r < 60 ? `${r}s` : `${Math.floor(r / 60)}m${r % 60}s`;
}

/** Runs the command with `args`; resolves with the exit code. */
export async function testMain(args: string[]): Promise<number> {
  const parsed = TEST_COMMAND.parse(args);
  if (!parsed) return 0;
  const f = parsed.values;
  if (f.record !== undefined) checkOutputs([f.record]);
  const files = heaviestFirst(findTestFiles(_ROOT, parsed.positionals), _seconds());
  const jobs = f.jobs ?? navigator.hardwareConcurrency;
  const t0 = performance.now();
  const check = await new Deno.Command(Deno.execPath(), {
    // and the command lines the tests run, which `deno run` does not type-check
    args: ["check", "--quiet", ...files, ...findEntryPoints(_ROOT)],
    cwd: _ROOT,
    stdin: "null",
  }).output();
  if (!check.success) {
    const dec = new TextDecoder();
    console.error(dec.decode(check.stdout) + dec.decode(check.stderr));
    console.error("error: the tests do not type-check");
    return 1;
  }
  const done = (r: FileRun) => {
    Deno.stdout.writeSync(
      new TextEncoder().encode(r.output.endsWith("\n") ? r.output : `${r.output}\n`),
    );
    if (r.killed) {
      const tail = r.killed.output.trimEnd().split("\n").slice(-5).map((l) => `  | ${l}`);
      console.log(
        `test: ${r.file} was killed by a signal (exit ${r.killed.code}${
          r.killed.signal ? `, ${r.killed.signal}` : ""
        }); its second run decides. The first run's last lines:\n${tail.join("\n")}`,
      );
    }
    if (r.code !== 0 && r.counts === undefined) {
      console.log(
        `test: ${r.file} exited ${r.code}${r.signal ? ` (${r.signal})` : ""} with no summary`,
      );
    }
  };
  // interrupted or terminated: the test processes go too
  const abort = new AbortController();
  const stop = () => abort.abort();
  for (const sig of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(sig, stop);
  const runs = await runTestFiles(files, {
    root: _ROOT,
    jobs,
    denoArgs: f.filter === undefined ? [] : ["--filter", f.filter],
    onDone: done,
    signal: abort.signal,
  });
  for (const sig of ["SIGINT", "SIGTERM"] as const) Deno.removeSignalListener(sig, stop);
  if (abort.signal.aborted) {
    console.error("error: interrupted; the test processes were stopped");
    return 130;
  }
  if (f.record !== undefined) {
    const rec = Object.fromEntries(
      runs.map((r) => [r.file, Math.round(r.seconds * 10) / 10] as const)
        .sort((a, b) => a[0] < b[0] ? -1 : 1),
    );
    await writeAllOrNothing([{ path: f.record, bytes: `${JSON.stringify(rec, null, 2)}\n` }]);
  }
  const t = totals(runs);
  const wall = (performance.now() - t0) / 1000;
  const ok = t.failedFiles.length === 0;
  if (!ok) console.log(`\ntest: files that did not pass: ${t.failedFiles.join(", ")}`);
  console.log(
    `\n${ok ? "ok" : "FAILED"} | ${t.passed} passed | ${t.failed} failed | ${t.ignored} ignored` +
      ` | ${files.length} files, ${Math.min(jobs, files.length)} at a time (${_fmt(wall)})`,
  );
  return ok ? 0 : 1;
}

if (import.meta.main) {
  await runCli(() => testMain(Deno.args));
}
