/**
 * `deno task gate [--update] [--baseline FILE] [--suite ci|tiny] [--methods a,b] [--rounds R]
 * [--out FILE] [--adapter auto|software|hardware]`: the regression gate (measure/gate.ts).
 *
 * Measures the suite on every method of the registry and compares with the committed baseline of
 * this adapter, `reports/gate_baseline_<adapter-slug>.json` (or FILE). Prints the comparison — a
 * table of what regressed, then a per-method summary — on stdout, progress on stderr, and exits 0
 * when nothing regressed, 1 when something did. Without a baseline of this adapter it compares
 * with another adapter's (memory and parity only; it says so), and without any it fails.
 *
 * `--update` measures with {@link UPDATE_ROUNDS_FACTOR} times the rounds and rewrites the baseline
 * atomically (a temporary file renamed over it), after showing how it differs from the old one;
 * it refuses (exit 1, nothing written) when a method's parity error is above the absolute limit.
 * `--out FILE` also writes this run's measurements as JSON. Bad flags print one line `error: …`
 * and exit 2 before anything is measured.
 * @module
 */
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { writeAtomic } from "../io/outputs.ts";
import { join } from "node:path";
import { paint } from "../core/progress.ts";
import { ADAPTER_FLAG, defineCommand, runCli } from "../core/cli.ts";
import { check, InputError, oneLine } from "../core/errors.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { parseMethods } from "../methods/mod.ts";
import { allMethods, METHOD_MODULE_FLAG } from "../measure/method_modules.ts";
import type { LceMethod } from "../methods/types.ts";
import { collectEnv, reportBaseName, type Table3Env } from "../report/table3.ts";
import { gateHost, gateTimeSource, runGate } from "../measure/gate.ts";
import {
  GATE_THRESHOLDS,
  type GateAdapter,
  type GateResult,
  type GateRun,
  type GateSuite,
  SUITES,
  UPDATE_ROUNDS_FACTOR,
} from "../measure/gate_suites.ts";
import { compareRuns } from "../measure/gate_compare.ts";
import { formatComparison } from "../measure/gate_format.ts";

/** The command line of `gate`. */
export const GATE_COMMAND = defineCommand({
  name: "deno task gate",
  summary: "The regression gate: measures the suite on every method and compares with the " +
    "committed baseline of this adapter; exit 0 when nothing regressed, 1 when something did, " +
    "2 for bad flags or a missing baseline. --update rewrites the baseline; while it runs, its " +
    "results so far are saved after every measured method (BASELINE.partial, or --out FILE) " +
    "and --update --resume FILE continues an interrupted update.",
  flags: {
    update: { type: "boolean", help: "measure again and rewrite the baseline" },
    baseline: {
      type: "string",
      arg: "FILE",
      help: "baseline file",
      defaultText: "reports/gate_baseline_<adapter>.json",
    },
    suite: { type: "string", help: "suite", default: "ci", arg: "ci|tiny" },
    methods: { type: "string", arg: "a,b", help: "methods to measure", defaultText: "all" },
    rounds: {
      type: "int",
      min: 1,
      help: "timed rounds",
      defaultText: "the suite's; twice that with --update",
    },
    out: { type: "string", arg: "FILE", help: "also write this run's measurements as JSON" },
    adapter: ADAPTER_FLAG,
    "method-module": METHOD_MODULE_FLAG,
    resume: {
      type: "string",
      arg: "FILE",
      help: "with --update: continue the partial run saved in FILE",
    },
  },
});

/** Where committed baselines live. */
export const BASELINE_DIR = "reports";

/** The validated command line. */
interface _Flags {
  update: boolean;
  baseline?: string;
  suite: GateSuite;
  methods: LceMethod[];
  partial: boolean;
  rounds?: number;
  out?: string;
  adapter: AdapterChoice;
  resume?: string;
}

/** Parses and validates the flags (InputError for anything wrong; nothing is opened). */
async function _parseFlags(args: string[]): Promise<_Flags | undefined> {
  const parsed = GATE_COMMAND.parse(args);
  if (!parsed) return undefined;
  const f = parsed.values;
  check(
    Object.hasOwn(SUITES, f.suite),
    `unknown suite '${f.suite}' (expected ${Object.keys(SUITES).join(" or ")})`,
  );
  const methods = parseMethods(f.methods, await allMethods(f["method-module"]));
  check(f.resume === undefined || f.update, "--resume continues an --update run; add --update");
  return {
    update: f.update,
    baseline: f.baseline,
    suite: SUITES[f.suite],
    methods,
    partial: f.methods !== undefined,
    rounds: f.rounds,
    out: f.out,
    adapter: f.adapter as AdapterChoice,
    resume: f.resume,
  };
}

/** The adapter's slug, as in the Table 3 report names (report/table3.ts). */
export function adapterSlug(env: Table3Env): string {
  const shape = { n: 1, v: 1, d: 1, dtype: "f32" as const };
  return reportBaseName({ env, shape }).replace(/^table3_/, "").replace(/_1x1x1_f32$/, "");
}

/** The committed baseline's path for an adapter slug. */
export function baselinePath(slug: string, dir = BASELINE_DIR): string {
  return join(dir, `gate_baseline_${slug}.json`);
}

/** Reads and checks a baseline file; InputError naming the file otherwise. */
export function readBaseline(path: string): GateRun {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new InputError(`cannot read baseline ${path}: ${(e as Error).message.split("\n")[0]}`);
  }
  let b: GateRun;
  try {
    b = JSON.parse(text);
  } catch (e) {
    throw new InputError(`baseline ${path} is not JSON: ${(e as Error).message.split("\n")[0]}`);
  }
  check(
    b !== null && typeof b === "object" && b.version === 1 && Array.isArray(b.results) &&
      typeof b.adapter?.slug === "string",
    `baseline ${path} is not a gate baseline (version 1)`,
  );
  check(
    b.complete !== false,
    `baseline ${path} is the partial file of an interrupted --update (complete: false); ` +
      "finish it with --update --resume",
  );
  return b;
}

/**
 * A run as the baseline file's JSON: one field per line, each list of numbers (the per-round
 * ratios) on one line, so that a baseline update reads as a short diff.
 */
export function formatBaseline(run: GateRun): string {
  return JSON.stringify(run, null, 1).replace(
    /\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]/g,
    (_, nums: string) => `[${nums.split(/,\s*/).join(", ")}]`,
  ) + "\n";
}

/** The baseline to compare with: this adapter's, else another adapter's (noted), else none. */
function _findBaseline(slug: string, fallback: boolean): string | undefined {
  const own = baselinePath(slug);
  if (existsSync(own)) return own;
  let others: string[] = [];
  try {
    others = readdirSync(BASELINE_DIR).filter((f) => /^gate_baseline_.+\.json$/.test(f)).sort();
  } catch {
    others = [];
  }
  if (others.length === 0) return undefined;
  // prefer a baseline of the same kind of adapter (software or hardware)
  const runs = others.map((f) => ({ f, r: readBaseline(join(BASELINE_DIR, f)) }));
  const same = runs.find((x) => x.r.adapter.isFallbackAdapter === fallback) ?? runs[0];
  return join(BASELINE_DIR, same.f);
}

/** The results of a partial --update run to resume; InputError unless it is this run's. */
function _readPartial(
  path: string,
  flags: _Flags,
  adapter: GateAdapter,
  rounds: number,
): GateResult[] {
  let b: GateRun;
  try {
    b = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume ${path}: cannot read a partial gate run: ${oneLine(e)}`);
  }
  check(
    b !== null && typeof b === "object" && b.version === 1 && Array.isArray(b.results) &&
      b.complete === false,
    `--resume ${path}: not the partial file of a gate --update (complete: false)`,
  );
  const same = (what: string, have: unknown, want: unknown) =>
    check(have === want, `--resume ${path}: ${what} ${have} in the file, ${want} asked`);
  same("suite", b.suite, flags.suite.name);
  same("adapter", b.adapter?.slug, adapter.slug);
  same("host", b.adapter?.host, adapter.host);
  same("rounds", b.rounds, rounds);
  const names = new Set(flags.methods.map((m) => m.name));
  const extra = b.results.find((r) => !names.has(r.method));
  check(
    extra === undefined,
    `--resume ${path}: method ${extra?.method} in the file is not among --methods`,
  );
  return b.results;
}

function _progress(s: string): void {
  console.error(paint("dim", "gate: ") + s);
}

/** Runs the command with `args`; returns the exit code (0 passed, 1 regressed). */
export async function gateMain(args: string[]): Promise<number> {
  const flags = await _parseFlags(args);
  if (!flags) return 0;
  if (flags.baseline !== undefined && !flags.update) readBaseline(flags.baseline); // fail early
  const started = performance.now();
  const ctx = await GpuContext.create({ adapter: flags.adapter });
  try {
    return await _gate(ctx, flags, started);
  } finally {
    ctx.destroy();
  }
}

async function _gate(ctx: GpuContext, flags: _Flags, started: number): Promise<number> {
  const env = await collectEnv(ctx);
  const adapter: GateAdapter = {
    slug: adapterSlug(env),
    description: ctx.report.description,
    isFallbackAdapter: ctx.report.isFallbackAdapter,
    timeSource: gateTimeSource(ctx),
  };
  const host = await gateHost(ctx);
  if (host !== undefined) adapter.host = host;
  const rounds = (flags.rounds ?? flags.suite.rounds) * (flags.update ? UPDATE_ROUNDS_FACTOR : 1);
  const done = flags.resume ? _readPartial(flags.resume, flags, adapter, rounds) : undefined;
  const path = flags.baseline ??
    (flags.update
      ? baselinePath(adapter.slug)
      : _findBaseline(adapter.slug, adapter.isFallbackAdapter));
  if (path === undefined) {
    throw new InputError(
      `no gate baseline in ${BASELINE_DIR}/ (expected ${baselinePath(adapter.slug)}); ` +
        `create it with deno task gate --update`,
    );
  }
  const old = existsSync(path) ? readBaseline(path) : undefined;
  if (old && old.suite !== flags.suite.name) {
    if (!flags.update) {
      throw new InputError(
        `baseline ${path} holds suite '${old.suite}', not '${flags.suite.name}'`,
      );
    }
  }
  // --update saves its results so far after every method (a file named like the baseline)
  const partialPath = flags.update ? (flags.out ?? `${path}.partial`) : undefined;
  const partialRun = (results: readonly GateResult[]): GateRun => ({
    version: 1,
    suite: flags.suite.name,
    adapter,
    env: { deno: env.deno.deno, os: env.os, date: env.date },
    rounds,
    thresholds: GATE_THRESHOLDS,
    results: [...results],
    complete: false,
  });
  _progress(
    `${flags.update ? "measuring a new baseline" : `comparing with ${path}`} on ` +
      `${adapter.description}: suite ${flags.suite.name}, ${flags.methods.length} methods, ` +
      `${rounds} rounds`,
  );
  const outcome = await runGate(ctx, {
    suite: flags.suite,
    methods: flags.methods,
    rounds,
    adapter,
    env: { deno: env.deno.deno, os: env.os, date: env.date },
    // --update compares afterwards, for the reader only (no re-runs)
    baseline: old && !flags.update ? old : undefined,
    partial: flags.partial,
    onProgress: _progress,
    done,
    onResult: partialPath
      ? (results) => writeAtomic(partialPath, formatBaseline(partialRun(results)))
      : undefined,
  });
  outcome.run.complete = true;
  const comparison = outcome.comparison ??
    (old && old.suite === flags.suite.name
      ? compareRuns(outcome.run, old, { partial: flags.partial })
      : undefined);
  const seconds = (performance.now() - started) / 1000;
  if (flags.out) writeAtomic(flags.out, formatBaseline(outcome.run));
  if (comparison) {
    console.log(
      `# Gate: ${flags.update ? "new baseline vs " : ""}${path} (${old!.adapter.description}, ` +
        `${old!.adapter.host ? `host ${old!.adapter.host}, ` : ""}${old!.env.date.slice(0, 10)})\n`,
    );
    console.log(formatComparison(comparison));
  }
  if (outcome.rerun.length) {
    _progress(
      `measured again: ${outcome.rerun.map((x) => `${x.key} ${x.mode}`).join("; ")}`,
    );
  }
  _progress(`took ${seconds.toFixed(0)} s`);
  if (flags.update) {
    const over = outcome.run.results.flatMap((r) =>
      r.parity
        ? (["loss", "dE", "dC"] as const).filter((a) =>
          !(r.parity![a] <= GATE_THRESHOLDS.parityMaxErr)
        )
          .map((a) => `${r.method} β=${r.beta} ${r.fixture} ${a} ${r.parity![a]}`)
        : []
    );
    if (over.length) {
      console.error(
        `error: not writing ${path}: parity error above ${GATE_THRESHOLDS.parityMaxErr}: ` +
          over.join("; "),
      );
      return 1;
    }
    if (flags.partial && old && old.suite === flags.suite.name) {
      // keep the other methods' baseline entries
      const measured = new Set(flags.methods.map((m) => m.name));
      outcome.run.results.push(...old.results.filter((r) => !measured.has(r.method)));
    }
    writeAtomic(path, formatBaseline(outcome.run));
    if (partialPath !== flags.out) rmSync(partialPath!, { force: true });
    if (flags.resume && flags.resume !== flags.out && flags.resume !== path) {
      rmSync(flags.resume, { force: true });
    }
    console.log(`gate: wrote ${path} (${outcome.run.results.length} results)`);
    return 0;
  }
  return comparison!.passed ? 0 : 1;
}

if (import.meta.main) {
  await runCli(async () => {
    const code = await gateMain(Deno.args);
    if (code !== 0) Deno.exit(code);
  });
}
