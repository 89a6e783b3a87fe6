/**
 * The project's tests spread over processes: every test file runs in a `deno test` process of
 * its own, `jobs` of them at a time, the heaviest first. On a machine without a GPU the tests'
 * time is almost all lavapipe compiling shaders through LLVM on the thread that creates the
 * pipeline, one core per process, so one `deno test` over every file leaves all other cores idle.
 * Separate processes (not `deno test --parallel`, whose modules share one process) keep the
 * environment, the WebGPU engine's native library and the temporary directories of each file its
 * own.
 *
 * The test files and the command lines they run ({@link findEntryPoints}) are type-checked once
 * first; the files then run with `--no-check`. A file whose process the system killed with a
 * signal (lavapipe's LLVM has aborted as a process exited after every test had passed) runs once
 * more, and that run decides; a file with a failed test never does.
 * @module
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { InputError } from "../core/errors.ts";

/** The directories never searched for tests (tools, bundles, outputs, dependencies). */
const _SKIP = new Set(["node_modules", "tools", "out", "reports", "tmp"]);
/** A test module's name, as `deno test` finds them. */
const _TEST_FILE = /(^|[_.])test\.(ts|tsx|mts|js|jsx|mjs)$/;

/**
 * The test files under `root` (relative paths, sorted), or only those inside `paths` (files or
 * directories, relative to `root`); a path that does not exist is an InputError. Hidden
 * directories and {@link _SKIP} are not searched.
 */
export function findTestFiles(root: string, paths: readonly string[] = []): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) {
        if (!e.name.startsWith(".") && !_SKIP.has(e.name)) walk(join(dir, e.name));
      } else if (_TEST_FILE.test(e.name)) found.push(relative(root, join(dir, e.name)));
    }
  };
  walk(root);
  found.sort();
  if (paths.length === 0) return found;
  const wanted = paths.map((p) => {
    const abs = resolve(root, p);
    if (!existsSync(abs)) throw new InputError(`${p}: no such file or directory`);
    return { rel: relative(root, abs), dir: statSync(abs).isDirectory() };
  });
  const picked = found.filter((f) =>
    wanted.some((w) => w.rel === "" || (w.dir ? f.startsWith(`${w.rel}/`) : f === w.rel))
  );
  if (picked.length === 0) throw new InputError(`no test files in ${paths.join(", ")}`);
  return picked;
}

/** The folders whose command lines the tests run as subprocesses (testing/run_script.ts). */
const _ENTRY_DIRS = ["scripts", "bench"];

/**
 * The command lines the tests run as subprocesses: every module directly in `scripts/` and
 * `bench/` under `root` that is not a test (relative paths, sorted). They are type-checked with
 * the tests, since `deno run` does not type-check and a test may be the only one to run them.
 */
export function findEntryPoints(root: string): string[] {
  const out: string[] = [];
  for (const dir of _ENTRY_DIRS) {
    const abs = join(root, dir);
    if (!existsSync(abs)) continue;
    for (const e of readdirSync(abs, { withFileTypes: true })) {
      if (e.isFile() && /\.ts$/.test(e.name) && !_TEST_FILE.test(e.name)) {
        out.push(`${dir}/${e.name}`);
      }
    }
  }
  return out.sort();
}

/**
 * `files` heaviest first by `seconds` (a file's time in an earlier run); a file without an entry
 * goes first, since it may be the heaviest of all, and ties keep the given order.
 */
export function heaviestFirst(
  files: readonly string[],
  seconds: Readonly<Record<string, number>>,
): string[] {
  const w = (f: string) => seconds[f] ?? Infinity;
  return files.map((f, i) => ({ f, i })).sort((a, b) => w(b.f) - w(a.f) || a.i - b.i)
    .map((x) => x.f);
}

/** The counts of a `deno test` summary line. */
export interface TestCounts {
  passed: number;
  failed: number;
  ignored: number;
}

/** The colour codes `deno test` prints, even into a pipe. */
const _ANSI = new RegExp(String.raw`\u001b\[[0-9;]*m`, "g");

/** The counts of the last `ok | … passed | … failed …` line of `deno test`'s output, if any. */
export function parseSummary(output: string): TestCounts | undefined {
  const lines = output.replace(_ANSI, "").split("\n").filter((l) => /^(ok|FAILED) \| /.test(l));
  const last = lines.at(-1);
  if (last === undefined) return undefined;
  const n = (what: string) => Number(new RegExp(`(\\d+) ${what}`).exec(last)?.[1] ?? 0);
  return { passed: n("passed"), failed: n("failed"), ignored: n("ignored") };
}

/** How one test file's process ended. */
export interface FileRun {
  file: string;
  /** The exit code; 128 + n for signal n. */
  code: number;
  /** The signal that killed the process, if one did. */
  signal?: string;
  /** Its counts, undefined when it printed no summary (it died, or did not load). */
  counts?: TestCounts;
  /** Wall-clock seconds. */
  seconds: number;
  /** Its stdout and stderr, interleaved as they came. */
  output: string;
  /** Runs it took: 2 when the first was killed by a signal. */
  attempts: number;
  /** How the first run ended, when it was killed and the file ran again. */
  killed?: { code: number; signal?: string; output: string };
}

/** Options of {@link runTestFiles}. */
export interface RunTestsOptions {
  /** The repository root, where each `deno test` runs. */
  root: string;
  /** Processes at a time (≥ 1). */
  jobs: number;
  /** More arguments of every `deno test` (e.g. `--filter`), before the file. */
  denoArgs?: readonly string[];
  /** Told of each file when its last run ends, in the order they end. */
  onDone?: (run: FileRun) => void;
  /** The deno executable (default this process's). */
  deno?: string;
  /** Aborting it kills the running test processes (SIGTERM) and starts no more. */
  signal?: AbortSignal;
}

async function _collect(stream: ReadableStream<Uint8Array>, sink: string[]): Promise<void> {
  const dec = new TextDecoder();
  for await (const chunk of stream) sink.push(dec.decode(chunk, { stream: true }));
}

async function _runOnce(file: string, o: RunTestsOptions): Promise<Omit<FileRun, "attempts">> {
  const t0 = performance.now();
  const child = new Deno.Command(o.deno ?? Deno.execPath(), {
    args: ["test", "-A", "--quiet", "--no-check", ...(o.denoArgs ?? []), file],
    cwd: o.root,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: o.signal,
  }).spawn();
  const out: string[] = [];
  const [status] = await Promise.all([
    child.status,
    _collect(child.stdout, out),
    _collect(child.stderr, out),
  ]);
  const output = out.join("");
  return {
    file,
    code: status.code,
    signal: status.signal ?? undefined,
    counts: parseSummary(output),
    seconds: (performance.now() - t0) / 1000,
    output,
  };
}

/** Whether a run ended by a signal (its own abort or the system's kill). */
export function killedBySignal(run: Pick<FileRun, "code" | "signal">): boolean {
  return run.signal !== undefined || run.code > 128;
}

/**
 * Runs each of `files` in a `deno test` process of its own, `jobs` at a time in the given order;
 * a file killed by a signal runs once more and that run decides. Resolves with every file's run,
 * in the given order (after an abort, only those that ran).
 */
export async function runTestFiles(
  files: readonly string[],
  o: RunTestsOptions,
): Promise<FileRun[]> {
  if (!Number.isInteger(o.jobs) || o.jobs < 1) throw new RangeError(`jobs ${o.jobs} < 1`);
  const runs = new Array<FileRun>(files.length);
  let next = 0;
  const worker = async () => {
    while (next < files.length && !o.signal?.aborted) {
      const i = next++;
      let run: FileRun = { ...await _runOnce(files[i], o), attempts: 1 };
      if (killedBySignal(run) && !o.signal?.aborted) {
        const killed = { code: run.code, signal: run.signal, output: run.output };
        run = { ...await _runOnce(files[i], o), attempts: 2, killed };
      }
      runs[i] = run;
      o.onDone?.(run);
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.jobs, files.length) }, worker));
  return runs.filter((r) => r !== undefined);
}

/** The totals of `runs` and the files that did not pass. */
export interface TestTotals extends TestCounts {
  /** Files whose process exited other than 0 (a failed test, a load error, a death). */
  failedFiles: string[];
}

/** Sums the counts of `runs`; a file failed when its process did not exit 0. */
export function totals(runs: readonly FileRun[]): TestTotals {
  const t: TestTotals = { passed: 0, failed: 0, ignored: 0, failedFiles: [] };
  for (const r of runs) {
    t.passed += r.counts?.passed ?? 0;
    t.failed += r.counts?.failed ?? 0;
    t.ignored += r.counts?.ignored ?? 0;
    if (r.code !== 0) t.failedFiles.push(r.file);
  }
  return t;
}
