/**
 * `./dev task gate [--update] [--baseline FILE] [--suite ci|tiny] [--methods a,b] [--rounds R]
 * [--out FILE] [--adapter auto|software|hardware] [--webgpu deno|dawn|dawn-unchecked] [--resume FILE]`: the
 * regression gate (measure/gate.ts).
 *
 * Measures the suite on every method of the registry and compares with the committed baseline of
 * this host (measure/gate_baseline.ts: `reports/gate_baseline_<adapter>_<engine>_<host>.json`,
 * or FILE): memory, parity and time; against another host's baseline, memory and parity only,
 * and the last line says so. Prints the comparison — what regressed, then a per-method summary —
 * on stdout, progress on stderr. Exit codes: 0 passed (having compared), 1 a regression, 2 bad
 * input (flags, a baseline that does not parse into complete results, a run and a baseline with
 * no result in common, no baseline at all, an output that cannot be written).
 *
 * `--update` measures with twice the rounds and writes this host's baseline beside the others,
 * atomically, after showing how it differs from the nearest old one; it refuses (exit 1, nothing
 * written) when a parity error is above the absolute limit. Its results so far are saved after
 * every method (BASELINE.partial, or --out FILE), which --update --resume FILE continues.
 * @module
 */
import { existsSync, rmSync } from "node:fs";
import { ADAPTER_FLAG, defineCommand, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { paint } from "../core/progress.ts";
import { checkOutputs, writeAtomic } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import type { Engine } from "../gpu/engine.ts";
import { METHOD_MODULE_FLAG, parseMethodList } from "../measure/method_modules.ts";
import type { LceMethod } from "../methods/types.ts";
import { gateAdapter, runGate } from "../measure/gate.ts";
import {
  GATE_THRESHOLDS,
  type GateResult,
  type GateRun,
  type GateSuite,
  hostText,
  SUITES,
  UPDATE_ROUNDS_FACTOR,
} from "../measure/gate_suites.ts";
import {
  baselineFor,
  baselinePath,
  type ChosenBaseline,
  formatBaseline,
  readBaseline,
  readPartialRun,
  writeBaseline,
} from "../measure/gate_baseline.ts";
import { checkComparable, compareRuns } from "../measure/gate_compare.ts";
import { formatComparison } from "../measure/gate_format.ts";
import { collectEnv } from "../report/table3.ts";

/** The command line of `gate`. */
export const GATE_COMMAND = defineCommand({
  name: "./dev task gate",
  summary: "The regression gate: measures the suite on every method and compares with the " +
    "committed baseline of this host (memory, parity and time; another host's: memory and " +
    "parity, and the last line says so); exit 0 passed, 1 regressed, 2 bad input. --update " +
    "writes this host's baseline beside the others; while it runs, its results so far are " +
    "saved after every measured method (BASELINE.partial, or --out FILE) and --update --resume " +
    "FILE continues an interrupted update.",
  flags: {
    update: { type: "boolean", help: "measure again and write this host's baseline" },
    baseline: {
      type: "string",
      arg: "FILE",
      help: "baseline file",
      defaultText: "this host's in reports/, else the nearest",
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
    webgpu: WEBGPU_FLAG,
    "method-module": METHOD_MODULE_FLAG,
    resume: {
      type: "string",
      arg: "FILE",
      help: "with --update: continue the partial run saved in FILE",
    },
  },
});

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
  engine: Engine;
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
  check(f.resume === undefined || f.update, "--resume continues an --update run; add --update");
  return {
    update: f.update,
    baseline: f.baseline,
    suite: SUITES[f.suite],
    methods: await parseMethodList(f.methods, f["method-module"]),
    partial: f.methods !== undefined,
    rounds: f.rounds,
    out: f.out,
    adapter: f.adapter as AdapterChoice,
    engine: f.webgpu as Engine,
    resume: f.resume,
  };
}

const _progress = (s: string) => console.error(paint("dim", "gate: ") + s);

/** Runs the command with `args`; returns the exit code (0 passed, 1 regressed). */
export async function gateMain(args: string[]): Promise<number> {
  const flags = await _parseFlags(args);
  if (!flags) return 0;
  // a baseline given must be complete before anything is measured
  const given = flags.baseline !== undefined && (!flags.update || existsSync(flags.baseline))
    ? readBaseline(flags.baseline)
    : undefined;
  if (flags.out !== undefined) checkOutputs([flags.out]);
  const ctx = await GpuContext.create({ adapter: flags.adapter, engine: flags.engine });
  try {
    return await _gate(ctx, flags, given);
  } finally {
    ctx.destroy();
  }
}

async function _gate(ctx: GpuContext, flags: _Flags, given: GateRun | undefined): Promise<number> {
  const started = performance.now();
  const env = await collectEnv(ctx);
  const adapter = await gateAdapter(ctx);
  const rounds = (flags.rounds ?? flags.suite.rounds) * (flags.update ? UPDATE_ROUNDS_FACTOR : 1);
  const old = baselineFor({
    given: given && { path: flags.baseline!, run: given },
    adapter,
    suite: flags.suite.name,
    update: flags.update,
  });
  const path = flags.update ? flags.baseline ?? baselinePath(adapter) : old!.path;
  if (!flags.update) checkComparable(flags.suite, flags.methods.map((m) => m.name), old!.run);
  // --update saves its results so far after every method (a file named like the baseline)
  const partialPath = flags.update ? (flags.out ?? `${path}.partial`) : undefined;
  checkOutputs([...new Set([path, partialPath].filter((p) => p !== undefined))]);
  const done = flags.resume
    ? readPartialRun(flags.resume, {
      suite: flags.suite.name,
      adapter,
      rounds,
      methods: flags.methods.map((m) => m.name),
    })
    : undefined;
  const runEnv = { deno: env.deno.deno, os: env.os, date: env.date };
  const partialRun = (results: readonly GateResult[]): GateRun => ({
    version: 1,
    suite: flags.suite.name,
    adapter,
    env: runEnv,
    rounds,
    thresholds: GATE_THRESHOLDS,
    results: [...results],
    complete: false,
  });
  _progress(
    `${flags.update ? `measuring a new baseline (${path})` : `comparing with ${path}`} on ` +
      `${hostText(adapter)}: suite ${flags.suite.name}, ${flags.methods.length} methods, ` +
      `${rounds} rounds`,
  );
  const outcome = await runGate(ctx, {
    suite: flags.suite,
    methods: flags.methods,
    rounds,
    adapter,
    env: runEnv,
    // --update compares afterwards, for the reader only (no re-runs)
    baseline: flags.update ? undefined : old?.run,
    partial: flags.partial,
    onProgress: _progress,
    done,
    onResult: partialPath
      ? (results) => writeAtomic(partialPath, formatBaseline(partialRun(results)))
      : undefined,
  });
  outcome.run.complete = true;
  if (flags.out) writeAtomic(flags.out, formatBaseline(outcome.run));
  const comparison = outcome.comparison ?? (old
    ? compareRuns(outcome.run, old.run, {
      partial: flags.partial,
      optional: flags.suite.optionalMethods,
    })
    : undefined);
  if (comparison && old) {
    const b = old.run.adapter;
    console.log(
      `# Gate: ${flags.update ? "new baseline vs " : ""}${old.path} (${hostText(b)}, ` +
        `${old.run.env.date.slice(0, 10)})\n`,
    );
    console.log(formatComparison(comparison));
  }
  if (outcome.rerun.length) {
    _progress(`measured again: ${outcome.rerun.map((x) => `${x.key} ${x.mode}`).join("; ")}`);
  }
  _progress(`took ${((performance.now() - started) / 1000).toFixed(0)} s`);
  if (!flags.update) return comparison!.passed ? 0 : 1;
  return _write(flags, outcome.run, old, path, partialPath!);
}

/** Writes the new baseline (refused above the parity limit); returns the exit code. */
function _write(
  flags: _Flags,
  run: GateRun,
  old: ChosenBaseline | undefined,
  path: string,
  partialPath: string,
): number {
  const own = old?.path === path ? old.run : undefined;
  const measured = flags.partial ? flags.methods.map((m) => m.name) : undefined;
  const error = writeBaseline(path, run, { own, measured });
  if (error !== undefined) {
    console.error(`error: ${error}`);
    return 1;
  }
  if (partialPath !== flags.out) rmSync(partialPath, { force: true });
  if (flags.resume && flags.resume !== flags.out && flags.resume !== path) {
    rmSync(flags.resume, { force: true });
  }
  console.log(`gate: wrote ${path} (${run.results.length} results)`);
  return 0;
}

if (import.meta.main) {
  await runCli(() => gateMain(Deno.args));
}
