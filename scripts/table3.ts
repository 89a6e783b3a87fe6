/**
 * `deno task table3 [--n N] [--v V] [--d D] [--dtype bf16|f16|f32] [--beta B] [--methods a,b]
 * [--modes fwd,bwd,fwd+bwd] [--fixture cce] [--seed S] [--reduction mean|sum|none] [--reps R]
 * [--warmup W] [--out DIR] [--adapter auto|software|hardware]`: reproduces the paper's Table 3.
 *
 * Every method is measured at β = B (default 0.1) and at β = 0, in every mode; progress goes to
 * stderr, the table (Markdown) to stdout, and the reports (md, json, csv, svg) to DIR (default
 * `reports/`). The default shape is the paper's (8192 × 256,000 × 2304, bf16) on a hardware
 * adapter, and {@link SOFTWARE_SHAPE} on a software (fallback) one, where the paper's shape would
 * take hours; the report says so. Bad flags print one line `error: …` and exit 2 before anything
 * is measured or written; a method that fails gets its row marked and the run goes on (exit 0).
 * @module
 */
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { paint, Progress } from "../core/progress.ts";
import { type ExternalRows, readExternalRows } from "../report/external.ts";
import { ADAPTER_FLAG, defineCommand, parseList, parseNumberValue, runCli } from "../core/cli.ts";
import { check, InputError, oneLine } from "../core/errors.ts";
import {
  type Dtype,
  type LceOptions,
  parseDtype,
  type Reduction,
  resolveOptions,
} from "../core/options.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { methodByName, parseMethods } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import { parseFixtureName } from "../fixtures/mod.ts";
import {
  defaultMemoryBudget,
  formatMiB,
  IDLE_GPU_BUSY_MS,
  IDLE_GPU_WARMUP_MS,
  measureMethod,
  type MeasureRow,
  type Mode,
  nvidiaMemoryBytes,
  parseModes,
} from "../measure/measure.ts";
import { type DeviceInputs, makeDeviceInputs } from "../measure/inputs.ts";
import {
  collectEnv,
  formatCell,
  formatMarkdown,
  PAPER_SHAPE,
  type Table3Plan,
  type Table3Report,
  type Table3Shape,
  writeReport,
} from "../report/table3.ts";

/**
 * The default shape on a software adapter (Mesa llvmpipe at ~5–10 GFLOP/s on 2 cores): the whole
 * table — every method, both β, three modes, {@link SOFTWARE_REPS} repetitions after
 * {@link SOFTWARE_WARMUP} warm-up — in about two minutes.
 */
export const SOFTWARE_SHAPE = { n: 256, v: 4096, d: 128 } as const;
/** Measured repetitions on a software adapter. */
export const SOFTWARE_REPS = 3;
/** Warm-up repetitions on a software adapter. */
export const SOFTWARE_WARMUP = 1;
/**
 * Least measured repetitions per cell on a hardware adapter; a cell repeats until
 * {@link HARDWARE_TARGET_MS} of GPU time is measured, up to {@link HARDWARE_MAX_REPS} (fast cells
 * get more repetitions, slow ones at least this many).
 */
export const HARDWARE_REPS = 3;
/** GPU time per cell the repetitions aim at on a hardware adapter, ms (without `--reps`). */
export const HARDWARE_TARGET_MS = 600;
/** Most measured repetitions per cell on a hardware adapter (without `--reps`). */
export const HARDWARE_MAX_REPS = 20;
/** Warm-up repetitions on a hardware adapter. */
export const HARDWARE_WARMUP = 1;

/** The repetitions of a cell: measured (the least with a target), warm-up, and the target. */
export interface Repetitions {
  reps: number;
  warmup: number;
  /** On hardware without `--reps`: repeat until this many ms are measured (MeasureOptions). */
  targetMs?: number;
  maxReps?: number;
  /** Skip the fwd+bwd cell's warm-up after its method's fwd and bwd (MeasureOptions.warmFwdBwd). */
  warmFwdBwd?: boolean;
}

/**
 * The repetitions table3 and the sweep use: `--reps`/`--warmup` as given, else
 * {@link SOFTWARE_REPS} on a software adapter and, on hardware, {@link HARDWARE_REPS} at least,
 * as many as fill {@link HARDWARE_TARGET_MS}, at most {@link HARDWARE_MAX_REPS}, and no
 * warm-up for a fwd+bwd cell measured right after its method's fwd and bwd cells.
 */
export function defaultRepetitions(
  software: boolean,
  flags: { reps?: number; warmup?: number },
): Repetitions {
  const r: Repetitions = {
    reps: flags.reps ?? (software ? SOFTWARE_REPS : HARDWARE_REPS),
    warmup: flags.warmup ?? (software ? SOFTWARE_WARMUP : HARDWARE_WARMUP),
  };
  if (!software && flags.reps === undefined) {
    r.targetMs = HARDWARE_TARGET_MS;
    r.maxReps = HARDWARE_MAX_REPS;
    r.warmFwdBwd = true;
  }
  return r;
}

/** The repetitions for a progress line: "3" or "3–20". */
export function repsText(r: Repetitions): string {
  return r.maxReps === undefined ? `${r.reps}` : `${r.reps}–${r.maxReps}`;
}

/** The command line of `table3`. */
export const TABLE3_COMMAND = defineCommand({
  name: "deno task table3",
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
      help: "input data (fixtures/mod.ts)",
      default: "cce",
      arg: "cce|llm|uniform|nonzero-mean",
    },
    seed: { type: "int", help: "seed of the inputs", default: 0 },
    reduction: { type: "string", help: "loss reduction", default: "mean", arg: "mean|sum|none" },
    reps: { type: "int", min: 1, help: "measured repetitions", defaultText: "5; 3 on software" },
    warmup: { type: "int", min: 0, help: "warm-up repetitions", defaultText: "1" },
    out: { type: "string", arg: "DIR", help: "report directory", default: "reports" },
    adapter: ADAPTER_FLAG,
    resume: {
      type: "string",
      arg: "FILE.json",
      help: "continue an interrupted run's report, measuring only the missing cells (--out " +
        "defaults to the report's directory)",
    },
  },
});

/** The validated command line. */
interface _Flags {
  n?: number;
  v?: number;
  d?: number;
  dtype: Dtype;
  beta: number;
  /** Sections to run (default [beta, 0], or [0] when beta is 0). */
  betas: number[];
  /** The loss options of each section, resolved (and β validated) once. */
  sections: LceOptions[];
  /** JSON of external rows (scripts/torch_peers.py) to merge, or undefined. */
  external?: ExternalRows;
  methods: LceMethod[];
  modes: Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps?: number;
  warmup?: number;
  out: string;
  adapter: AdapterChoice;
  /** The report to resume and its path. */
  resume?: { path: string; report: Table3Report };
}

/** Reads a report to resume; InputError naming the file. */
function _readResume(path: string): Table3Report {
  let r: Table3Report;
  try {
    r = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume ${path}: cannot read a JSON report: ${oneLine(e)}`);
  }
  check(
    r !== null && typeof r === "object" && Array.isArray(r.rows) && r.plan !== undefined &&
      typeof r.env?.adapter?.description === "string",
    `--resume ${path}: not a Table 3 report that can be resumed (no plan)`,
  );
  check(r.complete === false, `--resume ${path}: the report is complete; nothing to resume`);
  return r;
}

/** Throws unless `want` (the command line) equals `have` (the report's plan). */
function _same(path: string, what: string, want: unknown, have: unknown): void {
  const s = (x: unknown) => (Array.isArray(x) ? x.join(",") : String(x));
  check(
    s(want) === s(have),
    `--resume ${path}: ${what} ${s(have)} in the report, ${s(want)} asked (give the same flags)`,
  );
}

/** Parses and validates the flags (InputError for anything wrong; nothing is opened). */
function _parseFlags(args: string[]): _Flags | undefined {
  const parsed = TABLE3_COMMAND.parse(args);
  if (!parsed) return undefined;
  const f = parsed.values;
  const given = parsed.given;
  const beta = f.beta;
  const reduction = f.reduction as Reduction;
  // β is validated once, where the sections are resolved (_withSections)
  const betas = f.betas === undefined
    ? (beta > 0 ? [beta, 0] : [0])
    : parseList("--betas", f.betas).map((b) => parseNumberValue("--betas entries", b));
  const external = f.external === undefined ? undefined : readExternalRows(f.external);
  const methods = parseMethods(f.methods);
  const modes = parseModes(f.modes);
  const flags: Omit<_Flags, "sections"> = {
    n: f.n,
    v: f.v,
    d: f.d,
    dtype: parseDtype(f.dtype),
    beta,
    betas,
    external,
    methods,
    modes,
    fixture: parseFixtureName(f.fixture),
    seed: f.seed,
    reduction,
    reps: f.reps,
    warmup: f.warmup,
    out: f.out,
    adapter: f.adapter as AdapterChoice,
  };
  if (f.resume === undefined) return _withSections(flags);
  // flags given must match the report's plan; the others are taken from it
  const path = f.resume;
  const report = _readResume(path);
  const p = report.plan!;
  const shape = { n: f.n ?? p.shape.n, v: f.v ?? p.shape.v, d: f.d ?? p.shape.d };
  _same(path, "shape", [shape.n, shape.v, shape.d], [p.shape.n, p.shape.v, p.shape.d]);
  if (given.has("dtype")) _same(path, "dtype", flags.dtype, p.shape.dtype);
  if (given.has("fixture")) _same(path, "fixture", flags.fixture, p.fixture);
  if (given.has("seed")) _same(path, "seed", flags.seed, p.seed);
  if (given.has("beta") || given.has("betas")) _same(path, "β values", betas, p.betas);
  if (given.has("methods")) _same(path, "methods", methods.map((m) => m.name), p.methods);
  if (given.has("modes")) _same(path, "modes", modes, p.modes);
  if (given.has("reduction")) _same(path, "reduction", reduction, p.reduction);
  if (given.has("reps")) _same(path, "reps", flags.reps, p.reps);
  if (given.has("warmup")) _same(path, "warm-up", flags.warmup, p.warmup);
  return _withSections({
    ...flags,
    n: p.shape.n,
    v: p.shape.v,
    d: p.shape.d,
    dtype: p.shape.dtype,
    fixture: p.fixture,
    seed: p.seed,
    betas: p.betas,
    methods: p.methods.map(methodByName),
    modes: p.modes,
    reduction: p.reduction,
    reps: p.reps,
    warmup: p.warmup,
    external: external ?? report.external,
    // by default the finished reports go next to the one resumed
    out: given.has("out") ? flags.out : dirname(path),
    resume: { path, report },
  });
}

/** The flags with each β section's loss options resolved (the one validation of β). */
function _withSections(f: Omit<_Flags, "sections">): _Flags {
  return {
    ...f,
    sections: f.betas.map((beta) => resolveOptions({ beta, reduction: f.reduction })),
  };
}

/** Options of {@link measureCells}. */
export interface MeasureCellsOptions {
  /** Opens a fresh context (after a device loss). */
  openContext: () => Promise<GpuContext>;
  /** Uploads the inputs to a context. */
  openInputs: (ctx: GpuContext) => Promise<DeviceInputs>;
  /** The memory budget of a context, given the bytes of its inputs. */
  budget: (ctx: GpuContext, inputBytes: number) => number;
  spec: Table3Shape;
  /** The loss options of each β section, in order (resolveOptions). */
  sections: readonly LceOptions[];
  methods: readonly LceMethod[];
  modes: readonly Mode[];
  warmup: number;
  reps: number;
  /** Time per cell the repetitions aim at, and the most of them (see MeasureOptions.targetMs). */
  targetMs?: number;
  maxReps?: number;
  /** See MeasureOptions.warmFwdBwd. */
  warmFwdBwd?: boolean;
  /** Whether a cell was measured already (a resumed run): it is not measured again. */
  measured: (method: string, beta: number, mode: Mode) => boolean;
  /** Each row as soon as it is measured. */
  onRow: (row: MeasureRow, ms: number) => void;
  /** Called after each method (may throw to stop the run). */
  afterMethod?: () => void;
  /** Progress lines. */
  progress?: (line: string) => void;
}

/**
 * Measures every cell not yet measured, β by β, method by method. A device lost during a method
 * marks that method's remaining cells (`device lost: …`, see measureMethod) and the next method
 * runs on a fresh context with fresh inputs. Returns the context in use at the end (the caller
 * destroys it) and the bytes of its inputs; the inputs are destroyed.
 */
export async function measureCells(
  ctx: GpuContext,
  o: MeasureCellsOptions,
): Promise<{ ctx: GpuContext; inputBytes: number }> {
  let inputs: DeviceInputs | undefined;
  let inputBytes = 0, budget = 0;
  for (const opts of o.sections) {
    const beta = opts.beta;
    for (const method of o.methods) {
      const missing = o.modes.filter((m) => !o.measured(method.name, beta, m));
      if (missing.length === 0) continue;
      if (ctx.lostReason) {
        o.progress?.(`device lost (${ctx.lostReason}); opening a new one`);
        ctx = await o.openContext();
        inputs = undefined;
      }
      if (!inputs) {
        inputs = await o.openInputs(ctx);
        inputBytes = ctx.memory().liveBytes;
        budget = o.budget(ctx, inputBytes);
      }
      const gradOut = uploadGradOut(ctx, o.spec.n, opts);
      await measureMethod(ctx, method, {
        spec: o.spec,
        opts,
        inputs: inputs.inputs,
        gradOut,
        modes: missing,
        warmup: o.warmup,
        reps: o.reps,
        targetMs: o.targetMs,
        maxReps: o.maxReps,
        warmFwdBwd: o.warmFwdBwd,
        // the GPU idled while the method compiled: full load first, short first cells warm it up
        // for longer
        warmupMs: ctx.report.isFallbackAdapter ? undefined : IDLE_GPU_WARMUP_MS,
        busyLoad: !ctx.report.isFallbackAdapter,
        budgetBytes: budget,
        onRow: o.onRow,
      });
      if (!ctx.lostReason) gradOut.destroy();
      o.afterMethod?.();
    }
  }
  if (!ctx.lostReason) inputs?.destroy();
  return { ctx, inputBytes };
}

/** Runs the command with `args`. */
export async function table3Main(args: string[]): Promise<void> {
  const flags = _parseFlags(args);
  if (!flags) return;
  const started = performance.now();
  const prior = flags.resume?.report;
  let ctx = await GpuContext.create({ adapter: flags.adapter });
  if (prior) {
    const a = prior.env.adapter;
    if (
      a.description !== ctx.report.description ||
      a.isFallbackAdapter !== ctx.report.isFallbackAdapter
    ) {
      ctx.destroy();
      throw new InputError(
        `--resume ${flags.resume!.path}: measured on ${a.description}, this adapter is ` +
          `${ctx.report.description}`,
      );
    }
  }
  const software = ctx.report.isFallbackAdapter;
  const def = software ? { ...SOFTWARE_SHAPE, dtype: flags.dtype } : PAPER_SHAPE;
  const shape = {
    n: flags.n ?? def.n,
    v: flags.v ?? def.v,
    d: flags.d ?? def.d,
    dtype: flags.dtype,
  };
  const reduced = software &&
    (flags.n === undefined || flags.v === undefined || flags.d === undefined);
  const reducedShape = prior
    ? prior.reducedShape
    : reduced
    ? `The paper's shape (8192 × 256,000 × 2304) would take hours on the software adapter ` +
      `${ctx.report.description}, so the unset dimensions default to ` +
      `${SOFTWARE_SHAPE.n} × ${SOFTWARE_SHAPE.v} × ${SOFTWARE_SHAPE.d}, sized so that the whole ` +
      `table (every method, both β, three modes) finishes in about two minutes there.`
    : undefined;
  const repetitions = defaultRepetitions(software, flags);
  const { reps, warmup } = repetitions;
  const betas = flags.betas;
  const plan: Table3Plan = {
    shape,
    fixture: flags.fixture,
    seed: flags.seed,
    betas,
    methods: flags.methods.map((m) => m.name),
    modes: flags.modes,
    reduction: flags.reduction,
    warmup,
    reps,
  };
  const cellKey = (method: string, beta: number, mode: Mode) => `${method}|${beta}|${mode}`;
  const order = new Map<string, number>();
  for (const beta of betas) {
    for (const m of plan.methods) {
      for (const mode of plan.modes) order.set(cellKey(m, beta, mode), order.size);
    }
  }
  const total = order.size;
  const rows: MeasureRow[] = (prior?.rows ?? []).filter((r) =>
    order.has(cellKey(r.method, r.beta, r.mode))
  );
  const have = new Set(rows.map((r) => cellKey(r.method, r.beta, r.mode)));
  const gpuBytes = software ? undefined : await nvidiaMemoryBytes();
  // progress with the time left (a bar on a terminal, plain lines otherwise)
  const progress = new Progress({ label: "table3", total: total - rows.length });
  const say = (s: string) => progress.log(s);
  say(
    `${ctx.report.description}${software ? " (software)" : ""}: N=${shape.n} V=${shape.v} ` +
      `D=${shape.d} ${shape.dtype}, fixture ${flags.fixture}, β ∈ {${betas.join(", ")}}, ` +
      `${flags.methods.length} method${flags.methods.length === 1 ? "" : "s"}, modes ${
        flags.modes.join(",")
      }, ${repsText(repetitions)} reps after ` +
      `${warmup} warm-up${reduced ? " (reduced shape for the software adapter)" : ""}` +
      (prior ? `; resuming ${flags.resume!.path}: ${rows.length} of ${total} cells measured` : ""),
  );
  const report: Table3Report = {
    env: prior?.env ?? await collectEnv(ctx),
    shape,
    fixture: flags.fixture,
    generator: prior?.generator,
    seed: flags.seed,
    betas,
    modes: flags.modes,
    reduction: flags.reduction,
    warmup,
    reps,
    timeSource: ctx.hasTimestamps ? "gpu" : "wall",
    idleBusyMs: ctx.report.isFallbackAdapter ? undefined : IDLE_GPU_BUSY_MS,
    reducedShape,
    rows,
    external: flags.external,
    complete: false,
    plan,
  };
  // the reports: the JSON after every cell, all four at the end or when interrupted
  let stopping = false;
  let writeError: unknown;
  const save = (all: boolean) => {
    rows.sort((a, b) =>
      order.get(cellKey(a.method, a.beta, a.mode))! - order.get(cellKey(b.method, b.beta, b.mode))!
    );
    report.durationS = (prior?.durationS ?? 0) + (performance.now() - started) / 1000;
    return writeReport(report, flags.out, { jsonOnly: !all });
  };
  const saveJson = () => {
    if (stopping) return;
    save(false).catch((e) => writeError ??= e);
  };
  const onSignal = (sig: "SIGINT" | "SIGTERM") => async () => {
    if (stopping) return;
    stopping = true;
    say(`${sig}: writing the partial report (${rows.length} of ${total} cells)`);
    try {
      const paths = await save(true);
      say(`partial report: ${paths.json} (resume with --resume ${paths.json})`);
    } catch (e) {
      console.error(`error: ${oneLine(e)}`);
    }
    Deno.exit(sig === "SIGINT" ? 130 : 143);
  };
  const handlers = [["SIGINT", onSignal("SIGINT")], ["SIGTERM", onSignal("SIGTERM")]] as const;
  for (const [sig, h] of handlers) Deno.addSignalListener(sig, h);
  try {
    saveJson();
    if (writeError) throw writeError;
    let inputBytes = 0;
    ({ ctx, inputBytes } = await measureCells(ctx, {
      openContext: () => GpuContext.create({ adapter: flags.adapter }),
      async openInputs(c) {
        const x = await makeDeviceInputs(c, { fixture: flags.fixture, ...shape, seed: flags.seed });
        say(`inputs (${x.generator}) ready in ${(x.ms / 1000).toFixed(1)} s`);
        report.generator = x.generator;
        return x;
      },
      budget: (c, bytes) =>
        gpuBytes !== undefined ? gpuBytes - bytes - 512 * 2 ** 20 : defaultMemoryBudget(c),
      spec: shape,
      sections: flags.sections,
      methods: flags.methods,
      modes: flags.modes,
      ...repetitions,
      measured: (method, beta, mode) => have.has(cellKey(method, beta, mode)),
      onRow(row, ms) {
        rows.push(row);
        have.add(cellKey(row.method, row.beta, row.mode));
        saveJson();
        const cell = formatCell(row);
        progress.step(
          `[${have.size}/${total}] ${row.method} β=${row.beta} ${row.mode}: ` +
            `${row.error ? paint("red", cell) : cell} (${(ms / 1000).toFixed(1)} s)`,
        );
      },
      afterMethod() {
        if (writeError) throw writeError;
      },
      progress: say,
    }));
    if (stopping) await new Promise(() => {}); // the signal handler writes and exits
    report.complete = true;
    const paths = await save(true);
    progress.finish();
    const md = formatMarkdown(report);
    console.log(md.slice(0, md.indexOf("\n## Details")).trimEnd());
    const failed = rows.filter((r) => r.error !== undefined).length;
    say(
      `${failed === 0 ? "all rows measured" : `${failed} of ${rows.length} rows failed`}; ` +
        `${report.durationS!.toFixed(1)} s; inputs ${formatMiB(inputBytes)}; wrote ` +
        `${paths.md}, ${paths.json}, ${paths.csv}, ${paths.svg}`,
    );
  } finally {
    for (const [sig, h] of handlers) Deno.removeSignalListener(sig, h);
    ctx.destroy();
  }
}

if (import.meta.main) {
  await runCli(() => table3Main(Deno.args));
}
