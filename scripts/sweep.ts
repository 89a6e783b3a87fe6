/**
 * `./dev task sweep --over v|n|d [--values a,b,c] [--n N] [--v V] [--d D] [--dtype bf16|f16|f32]
 * [--beta B | --betas a,b] [--methods a,b] [--modes fwd,bwd,fwd+bwd] [--fixture cce] [--seed S]
 * [--reduction mean|sum|none] [--reps R] [--warmup W] [--external F.json,…] [--out DIR]
 * [--adapter auto|software|hardware] [--resume] [--method-module PATH]... [--history FILE.csv]`
 * (flags: {@link SWEEP_COMMAND}): measures the methods at each value of one size with the others
 * fixed, every cell checked for correctness (report/sweep_run.ts, measure/check.ts), and writes
 * `sweep_<adapter>_<over>.{csv,json}` and `…_time.svg`, `…_memory.svg` under DIR (default
 * `out/`).
 *
 * The fixed sizes default to the paper's shape on a hardware adapter and to table3's reduced
 * shape on a software one; the values default to 4 doublings ending at that size. β defaults to
 * 0.1 only (one section; `--betas 0.1,0` for both, at twice the time). The JSON and CSV are
 * rewritten after every cell, so a killed run keeps what it measured; the charts are drawn at
 * the end. A method that fails at a size leaves a gap (its reason in the JSON) and the sweep goes
 * on. `--external` takes JSON files of scripts/torch_peers.py (one per size); those whose
 * fixed sizes match are drawn as dashed lines and added to the CSV. `--resume` keeps the cells
 * an earlier run of the same sweep measured in DIR. Exit codes: 0 every cell measured, 1 a cell
 * failed, 2 bad input (one line `error: …` before anything is measured or written).
 * @module
 */
import {
  ADAPTER_FLAG,
  defineCommand,
  parseIntValue,
  parseList,
  parseNumberValue,
  runCli,
  WEBGPU_FLAG,
} from "../core/cli.ts";
import { check } from "../core/errors.ts";
import { parseDtype, type Reduction, resolveOptions } from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { type Engine, parseEngine } from "../gpu/engine.ts";
import { parseMethods } from "../methods/mod.ts";
import { allMethods, METHOD_MODULE_FLAG } from "../measure/method_modules.ts";
import { checkHistoryPath, HISTORY_FLAG } from "../measure/history.ts";
import { parseFixture } from "../fixtures/mod.ts";
import { parseModes } from "../measure/measure.ts";
import { SWEEP_AXES, type SweepAxis } from "../measure/sweep.ts";
import { readExternalRows } from "../report/external.ts";
import { defaultValues, runSweepReport, type SweepRunOptions } from "../report/sweep_run.ts";

export { defaultValues };

/** The command line of `sweep`. */
export const SWEEP_COMMAND = defineCommand({
  name: "./dev task sweep",
  summary: "Measures the methods at each value of one size (|V|, N or D) with the others fixed " +
    "and writes sweep_<adapter>_<over>.{csv,json} (long format; the JSON with raw samples, " +
    "rewritten after every cell) and two line charts, _time.svg and _memory.svg, into --out. A " +
    "method that fails at a size leaves a gap there (its reason in the JSON) and the sweep goes on.",
  flags: {
    over: { type: "string", help: "the swept size", choices: ["v", "n", "d"], required: true },
    values: {
      type: "string",
      arg: "a,b,c",
      help: "its values",
      defaultText: "four doublings ending at the default size",
    },
    n: { type: "int", min: 1, help: "tokens (fixed)", defaultText: "8192; 256 on software" },
    v: { type: "int", min: 1, help: "vocabulary (fixed)", defaultText: "256000; 4096 on software" },
    d: { type: "int", min: 1, help: "hidden size (fixed)", defaultText: "2304; 128 on software" },
    dtype: { type: "string", help: "input dtype", default: "bf16", arg: "bf16|f16|f32" },
    beta: { type: "number", min: 0, max: 1, help: "label smoothing", default: 0.1 },
    betas: { type: "string", arg: "B,B", help: "several β (e.g. 0.1,0)", defaultText: "B only" },
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
    reps: {
      type: "int",
      min: 1,
      help: "measured repetitions",
      defaultText: "as table3: 3 on software; on hardware until 0.6 s per cell (3 to 20)",
    },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "1" },
    external: {
      type: "string",
      arg: "F.json,F.json",
      help: "same-card rows of scripts/torch_peers.py (one file per size); those whose fixed " +
        "sizes match are added",
    },
    out: { type: "string", arg: "DIR", help: "report directory", default: "out" },
    "allow-dirty": {
      type: "boolean",
      help: "write into reports/ from a tree with uncommitted changes (the report says so)",
    },
    adapter: ADAPTER_FLAG,
    webgpu: WEBGPU_FLAG,
    "method-module": METHOD_MODULE_FLAG,
    history: HISTORY_FLAG,
    resume: {
      type: "boolean",
      help: "keep the cells an earlier run of the same sweep measured in --out without error " +
        "and measure only the rest",
    },
  },
});

/** The validated command line (before the context opener is added). */
type _Flags = Omit<SweepRunOptions, "open"> & { adapter: AdapterChoice; engine: Engine };

/**
 * Parses and validates the flags (InputError for anything wrong; nothing is opened). Returns
 * undefined after printing --help.
 */
async function _parseFlags(args: string[]): Promise<_Flags | undefined> {
  const parsed = SWEEP_COMMAND.parse(args);
  if (!parsed) return undefined;
  const f = parsed.values;
  const over = f.over as SweepAxis;
  check(
    !parsed.given.has(over),
    `--${over} is the swept size (--over ${over}): give its values with --values`,
  );
  const fixed: Partial<Record<SweepAxis, number>> = {};
  for (const k of SWEEP_AXES) if (f[k] !== undefined) fixed[k] = f[k];
  const sizes = f.values === undefined
    ? undefined
    : parseList("--values", f.values).map((x) => parseIntValue("--values entries", x, { min: 1 }));
  check(
    !(parsed.given.has("beta") && parsed.given.has("betas")),
    "give --beta or --betas, not both",
  );
  const betas = f.betas === undefined
    ? [f.beta]
    : parseList("--betas", f.betas).map((b) =>
      parseNumberValue("--betas entries", b, { min: 0, max: 1 })
    );
  const reduction = f.reduction as Reduction;
  resolveOptions({ beta: betas[0], reduction });
  const external = f.external === undefined
    ? []
    : parseList("--external", f.external).map(readExternalRows);
  const methods = parseMethods(f.methods, await allMethods(f["method-module"]));
  if (f.history !== undefined) checkHistoryPath(f.history);
  const modes = parseModes(f.modes);
  return {
    over,
    values: sizes,
    fixed,
    dtype: parseDtype(f.dtype),
    betas,
    external,
    methods,
    modes,
    fixture: parseFixture(f.fixture).spec,
    seed: f.seed,
    reduction,
    reps: f.reps,
    warmup: f.warmup,
    out: f.out,
    allowDirty: f["allow-dirty"],
    adapter: f.adapter as AdapterChoice,
    engine: parseEngine(f.webgpu),
    resume: f.resume,
    history: f.history,
  };
}

/** Runs the command with `args`; returns the exit code (0 done, 1 a cell failed). */
export async function sweepMain(args: string[]): Promise<number> {
  const flags = await _parseFlags(args);
  if (!flags) return 0;
  return await runSweepReport({
    ...flags,
    open: () => GpuContext.create({ adapter: flags.adapter, engine: flags.engine }),
  });
}

if (import.meta.main) {
  await runCli(() => sweepMain(Deno.args));
}
