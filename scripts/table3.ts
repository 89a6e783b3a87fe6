/**
 * `./dev task table3 [--n N] [--v V] [--d D] [--dtype bf16|f16|f32] [--beta B] [--methods a,b]
 * [--modes fwd,bwd,fwd+bwd] [--fixture cce] [--seed S] [--reduction mean|sum|none] [--reps R]
 * [--warmup W] [--out DIR] [--adapter auto|software|hardware] [--resume FILE.json]
 * [--method-module PATH]... [--history FILE.csv] [--time-source gpu|wall|cpu]`: reproduces the
 * paper's Table 3 (report/table3_run.ts), every cell checked for correctness before it is ranked
 * (measure/check.ts), your own methods beside the built-in ones (docs/harness.md).
 *
 * Every method is measured at β = B (default 0.1) and at β = 0, in every mode; progress goes to
 * stderr, the table (Markdown) to stdout, and the reports (md, json, csv, svg) to DIR (default
 * `out/`). The default shape is the paper's (8192 × 256,000 × 2304, bf16) on a hardware adapter,
 * and measure/table3.ts's SOFTWARE_SHAPE on a software (fallback) one, where the paper's shape
 * would take hours; the report says so. Exit codes: 0 every cell measured; 1 a cell failed (its
 * row is marked, the run goes on and writes its reports); 2 bad input — one line `error: …`
 * before anything is measured or written.
 * @module
 */
import { dirname } from "node:path";
import {
  ADAPTER_FLAG,
  defineCommand,
  parseList,
  parseNumberValue,
  runCli,
  WEBGPU_FLAG,
} from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { parseDtype, type Reduction, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { type Engine, parseEngine } from "../gpu/engine.ts";
import { methodByName, parseMethods } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import { parseFixture } from "../fixtures/mod.ts";
import { parseModes, type TimeSource } from "../measure/measure.ts";
import { allMethods, METHOD_MODULE_FLAG } from "../measure/method_modules.ts";
import { checkHistoryPath, HISTORY_FLAG } from "../measure/history.ts";
import { readExternalRows } from "../report/external.ts";
import { readResumeReport, runTable3, type Table3RunOptions } from "../report/table3_run.ts";

/** The command line of `table3`. */
export const TABLE3_COMMAND = defineCommand({
  name: "./dev task table3",
  summary: "Reproduces the paper's Table 3: every method at β = B and β = 0 in every mode; the " +
    "table on stdout, progress on stderr, the reports (md, json, csv, svg) in --out. The JSON " +
    'is rewritten after every measured cell ("complete": false until the end); an interrupted ' +
    "run (SIGINT, SIGTERM) writes all four marked partial, and --resume FILE.json measures only " +
    "the missing cells.",
  flags: {
    n: { type: "int", min: 1, help: "tokens", defaultText: "8192; 256 on a software adapter" },
    v: { type: "int", min: 1, help: "vocabulary", defaultText: "256000; 4096 on software" },
    d: { type: "int", min: 1, help: "hidden size", defaultText: "2304; 128 on software" },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    beta: {
      type: "number",
      help: "label smoothing of the β > 0 section, in [0, 1]",
      default: 0.1,
    },
    betas: {
      type: "string",
      arg: "B,B",
      help: "sections to run",
      defaultText: "B,0 (0 if B is 0)",
    },
    external: {
      type: "string",
      arg: "FILE.json",
      help: "same-card rows of scripts/torch_peers.py to merge",
    },
    methods: { type: "string", arg: "a,b", help: "methods (methods/mod.ts)", defaultText: "all" },
    modes: { type: "string", arg: "fwd,bwd,fwd+bwd", help: "modes", defaultText: "all three" },
    fixture: {
      type: "string",
      help: "input data (fixtures/mod.ts; llm takes parameters: llm:spread=2,zipf=1.5)",
      default: "cce",
      arg: "cce|llm|uniform|nonzero-mean",
    },
    seed: { type: "int", help: "seed of the inputs", default: 0 },
    reduction: { type: "string", help: "loss reduction", default: "mean", arg: "mean|sum|none" },
    reps: { type: "int", min: 1, help: "measured repetitions", defaultText: "5; 3 on software" },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "1" },
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    "allow-dirty": {
      type: "boolean",
      help: "write into reports/ from a tree with uncommitted changes (the report says so)",
    },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
    "method-module": METHOD_MODULE_FLAG,
    history: HISTORY_FLAG,
    "time-source": {
      type: "string",
      choices: ["gpu", "wall", "cpu"],
      help: "where times come from: GPU timestamps, wall time, or the process's CPU time (the " +
        "steadiest on a shared software adapter)",
      defaultText: "gpu; wall without timestamp queries",
    },
    resume: {
      type: "string",
      arg: "FILE.json",
      help: "continue an interrupted run's report, measuring only the missing cells (--out " +
        "defaults to the report's directory)",
    },
  },
});

/** The validated command line (before the context opener is added). */
type _Flags = Omit<Table3RunOptions, "open"> & { adapter: AdapterChoice; engine: Engine };

/** Throws unless `want` (the command line) equals `have` (the report's plan). */
function _same(path: string, what: string, want: unknown, have: unknown): void {
  const s = (x: unknown) => (Array.isArray(x) ? x.join(",") : String(x));
  check(
    s(want) === s(have),
    `--resume ${path}: ${what} ${s(have)} in the report, ${s(want)} asked (give the same flags)`,
  );
}

/** Parses and validates the flags (InputError for anything wrong; nothing is opened). */
async function _parseFlags(args: string[]): Promise<_Flags | undefined> {
  const parsed = TABLE3_COMMAND.parse(args);
  if (!parsed) return undefined;
  const f = parsed.values;
  // β is validated once, where the sections are resolved (_withSections)
  const all = await allMethods(f["method-module"]);
  if (f.history !== undefined) checkHistoryPath(f.history);
  const betas = f.betas === undefined
    ? (f.beta > 0 ? [f.beta, 0] : [0])
    : parseList("--betas", f.betas).map((b) => parseNumberValue("--betas entries", b));
  const flags: _Given = {
    n: f.n,
    v: f.v,
    d: f.d,
    dtype: parseDtype(f.dtype),
    betas,
    external: f.external === undefined ? undefined : readExternalRows(f.external),
    methods: parseMethods(f.methods, all),
    modes: parseModes(f.modes),
    fixture: parseFixture(f.fixture).spec,
    seed: f.seed,
    reduction: f.reduction as Reduction,
    reps: f.reps,
    warmup: f.warmup,
    out: f.out,
    allowDirty: f["allow-dirty"],
    adapter: f.adapter as AdapterChoice,
    engine: parseEngine(f.webgpu),
    history: f.history,
    timeSource: f["time-source"] as TimeSource | undefined,
  };
  if (f.resume === undefined) return _withSections(flags);
  return _withSections(_resumed(f.resume, flags, parsed.given, all));
}

/** The flags before the sections are resolved. */
type _Given = Omit<_Flags, "sections">;

/**
 * The flags of a resumed run: those given must match the report's plan; the others are taken
 * from it; the reports go next to the one resumed unless --out is given.
 */
function _resumed(
  path: string,
  flags: _Given,
  given: Set<string>,
  all: readonly LceMethod[],
): _Given {
  const report = readResumeReport(path);
  const p = report.plan!;
  const shape = { n: flags.n ?? p.shape.n, v: flags.v ?? p.shape.v, d: flags.d ?? p.shape.d };
  _same(path, "shape", [shape.n, shape.v, shape.d], [p.shape.n, p.shape.v, p.shape.d]);
  const pairs: [string, string, unknown, unknown][] = [
    ["dtype", "dtype", flags.dtype, p.shape.dtype],
    ["fixture", "fixture", flags.fixture, p.fixture],
    ["seed", "seed", flags.seed, p.seed],
    ["methods", "methods", flags.methods.map((m) => m.name), p.methods],
    ["modes", "modes", flags.modes, p.modes],
    ["reduction", "reduction", flags.reduction, p.reduction],
    ["reps", "reps", flags.reps, p.reps],
    ["warmup", "warm-up", flags.warmup, p.warmup],
  ];
  for (const [flag, what, want, have] of pairs) if (given.has(flag)) _same(path, what, want, have);
  if (given.has("beta") || given.has("betas")) _same(path, "β values", flags.betas, p.betas);
  return {
    ...flags,
    ...p.shape,
    fixture: p.fixture,
    seed: p.seed,
    betas: p.betas,
    methods: p.methods.map((m) => methodByName(m, all)),
    modes: p.modes,
    reduction: p.reduction,
    reps: p.reps,
    warmup: p.warmup,
    engine: given.has("webgpu") ? flags.engine : report.env.adapter.engine ?? "deno",
    external: flags.external ?? report.external,
    out: given.has("out") ? flags.out : dirname(path),
    resume: { path, report },
  };
}

/** The flags with each β section's loss options resolved (the one validation of β). */
function _withSections(f: _Given): _Flags {
  return {
    ...f,
    sections: f.betas.map((beta) => resolveOptions({ beta, reduction: f.reduction })),
  };
}

/** Runs the command with `args`; returns the exit code (0 done, 1 a cell failed). */
export async function table3Main(args: string[]): Promise<number> {
  const flags = await _parseFlags(args);
  if (!flags) return 0;
  const open = () => GpuContext.create({ adapter: flags.adapter, engine: flags.engine });
  return await runTable3({ ...flags, open });
}

if (import.meta.main) {
  await runCli(() => table3Main(Deno.args));
}
