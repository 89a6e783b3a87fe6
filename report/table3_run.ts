/**
 * A Table 3 run: opens the adapter, measures every cell of the plan (measure/table3.ts) and keeps
 * its reports on disk as it goes — the JSON after every cell (`complete: false` until the end),
 * all four files at the end or when SIGINT or SIGTERM stops it (marked partial) — and resumes a
 * partial report, measuring only its missing cells. Exit codes: 0 when every cell was measured,
 * 1 when some failed (their rows say why; cells a method does not support are marked
 * `unsupported` and do not count), bad input throws an InputError before anything is measured.
 * @module
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { checkOutputDir, checkOutputs } from "../io/outputs.ts";
import { check, InputError, oneLine } from "../core/errors.ts";
import { paint, Progress } from "../core/progress.ts";
import type { Dtype, LceOptions, Reduction } from "../core/options.ts";
import type { GpuContext } from "../gpu/context.ts";
import { engineName } from "../gpu/engine.ts";
import type { LceMethod } from "../methods/types.ts";
import {
  failedAtRunTime,
  formatMiB,
  IDLE_GPU_BUSY_MS,
  type MeasureRow,
  type Mode,
  type TimeSource,
} from "../measure/measure.ts";
import { inputNeed, makeDeviceInputs } from "../measure/inputs.ts";
import {
  cellKey,
  cellOrder,
  defaultRepetitions,
  defaultShape,
  measureCells,
  type Repetitions,
  repsText,
  SOFTWARE_SHAPE,
  type Table3Plan,
} from "../measure/table3.ts";
import type { ExternalRows } from "./external.ts";
import {
  collectEnv,
  formatCell,
  formatMarkdown,
  reportBaseName,
  type Table3Report,
} from "./table3.ts";
import { checkReportSource } from "./provenance.ts";
import { CheckRun } from "../measure/check.ts";
import { upsertReportHistory } from "../measure/history.ts";
import { checkText, isIncorrect } from "./check_format.ts";
import { type ReportPaths, writeReport } from "./table3_files.ts";

/** What a run measures and where it writes (the validated command line). */
export interface Table3RunOptions {
  /** Sizes given; the rest default to the adapter's (measure/table3.ts defaultShape). */
  n?: number;
  v?: number;
  d?: number;
  dtype: Dtype;
  betas: number[];
  /** The loss options of each β section, resolved (and β validated) once. */
  sections: LceOptions[];
  external?: ExternalRows;
  methods: LceMethod[];
  modes: Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps?: number;
  warmup?: number;
  /** Report directory. */
  out: string;
  /** Write into the committed reports folder from a tree with uncommitted changes (marked). */
  allowDirty?: boolean;
  /** Opens a context (again after a device loss). */
  open: () => Promise<GpuContext>;
  /** The partial report to resume and its path. */
  resume?: { path: string; report: Table3Report };
  /** The history CSV every cell is upserted into at the end (measure/history.ts). */
  history?: string;
  /** Where times come from (MeasureOptions.timeSource; default GPU timestamps, else wall). */
  timeSource?: TimeSource;
}

/** Reads a report to resume; InputError naming the file. */
export function readResumeReport(path: string): Table3Report {
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

/** A run in progress: its report, the rows so far and their order. */
interface _Run {
  report: Table3Report;
  rows: MeasureRow[];
  order: Map<string, number>;
  have: Set<string>;
  repetitions: Repetitions;
  reduced: boolean;
  started: number;
  priorS: number;
  /** The correctness checks of the run (measure/check.ts). */
  checks: CheckRun;
}

/** The plan and the report of a run on `ctx` (the resumed report's rows kept). */
async function _start(ctx: GpuContext, o: Table3RunOptions): Promise<_Run> {
  const prior = o.resume?.report;
  const software = ctx.report.isFallbackAdapter;
  const { shape, reduced } = defaultShape(software, o);
  const repetitions = defaultRepetitions(software, o);
  const plan: Table3Plan = {
    shape,
    fixture: o.fixture,
    seed: o.seed,
    betas: o.betas,
    methods: o.methods.map((m) => m.name),
    modes: o.modes,
    reduction: o.reduction,
    warmup: repetitions.warmup,
    reps: repetitions.reps,
  };
  const order = cellOrder(plan);
  const rows = (prior?.rows ?? []).filter((r) => order.has(cellKey(r.method, r.beta, r.mode)));
  const reducedShape = prior
    ? prior.reducedShape
    : reduced
    ? `The paper's shape (8192 × 256,000 × 2304) would take hours on the software adapter ` +
      `${ctx.report.description}, so the unset dimensions default to ` +
      `${SOFTWARE_SHAPE.n} × ${SOFTWARE_SHAPE.v} × ${SOFTWARE_SHAPE.d}, sized so that the whole ` +
      `table (every method, both β, three modes) finishes in a few minutes there.`
    : undefined;
  const report: Table3Report = {
    env: prior?.env ?? await collectEnv(ctx),
    shape,
    fixture: o.fixture,
    generator: prior?.generator,
    seed: o.seed,
    betas: o.betas,
    modes: o.modes,
    reduction: o.reduction,
    warmup: repetitions.warmup,
    reps: repetitions.reps,
    timeSource: o.timeSource ?? (ctx.hasTimestamps ? "gpu" : "wall"),
    idleBusyMs: software ? undefined : IDLE_GPU_BUSY_MS,
    busyEachCell: software ? undefined : true,
    reducedShape,
    rows,
    external: o.external,
    complete: false,
    plan,
  };
  const have = new Set(rows.map((r) => cellKey(r.method, r.beta, r.mode)));
  const started = performance.now();
  return {
    report,
    rows,
    order,
    have,
    repetitions,
    reduced,
    started,
    priorS: prior?.durationS ?? 0,
    checks: new CheckRun(shape.dtype),
  };
}

/**
 * Keeps a run's reports on disk: the JSON after every cell (a failed write stops the run after
 * the method in progress), all four at the end, and all four marked partial on SIGINT/SIGTERM.
 */
class _Keeper {
  stopping = false;
  writeError: unknown;
  #handlers: [Deno.Signal, () => void][] = [];
  constructor(private run: _Run, private out: string, private say: (s: string) => void) {}

  save(all: boolean): Promise<ReportPaths> {
    const { run } = this;
    const rank = (r: MeasureRow) => run.order.get(cellKey(r.method, r.beta, r.mode))!;
    run.rows.sort((a, b) => rank(a) - rank(b));
    run.report.durationS = run.priorS + (performance.now() - run.started) / 1000;
    run.report.check = run.checks.summary(run.rows);
    return writeReport(run.report, this.out, { jsonOnly: !all });
  }

  saveJson(): void {
    if (this.stopping) return;
    this.save(false).catch((e) => this.writeError ??= e);
  }

  listen(): void {
    const total = this.run.order.size;
    const on = (sig: "SIGINT" | "SIGTERM") => async () => {
      if (this.stopping) return;
      this.stopping = true;
      this.say(`${sig}: writing the partial report (${this.run.rows.length} of ${total} cells)`);
      try {
        const paths = await this.save(true);
        this.say(`partial report: ${paths.json} (resume with --resume ${paths.json})`);
      } catch (e) {
        console.error(`error: ${oneLine(e)}`);
      }
      Deno.exit(sig === "SIGINT" ? 130 : 143);
    };
    this.#handlers = [["SIGINT", on("SIGINT")], ["SIGTERM", on("SIGTERM")]];
    for (const [sig, h] of this.#handlers) Deno.addSignalListener(sig, h);
  }

  close(): void {
    for (const [sig, h] of this.#handlers) Deno.removeSignalListener(sig, h);
  }
}

/** The first progress line: adapter, problem, plan and what a resume keeps. */
function _intro(ctx: GpuContext, o: Table3RunOptions, run: _Run): string {
  const { shape } = run.report;
  const software = ctx.report.isFallbackAdapter;
  const n = o.methods.length;
  return `${ctx.report.description}${software ? " (software)" : ""}, ${
    engineName(ctx.engine)
  }: N=${shape.n} ` +
    `V=${shape.v} D=${shape.d} ${shape.dtype}, fixture ${o.fixture}, β ∈ {${
      o.betas.join(", ")
    }}, ` +
    `${n} method${n === 1 ? "" : "s"}, modes ${o.modes.join(",")}, ` +
    `${repsText(run.repetitions)} reps after ${run.repetitions.warmup} warm-up` +
    `${run.reduced ? " (reduced shape for the software adapter)" : ""}` +
    (o.resume
      ? `; resuming ${o.resume.path}: ${run.rows.length} of ${run.order.size} cells measured`
      : "");
}

/**
 * Runs the table: measures every missing cell, writes the reports, prints the table on stdout;
 * returns the exit code (0 all measured, 1 some cell failed).
 */
export async function runTable3(o: Table3RunOptions): Promise<number> {
  checkOutputDir(o.out, `--out ${o.out}`);
  await checkReportSource(o.out, { allowDirty: o.allowDirty ?? false });
  let ctx = await o.open();
  try {
    _checkResumeAdapter(ctx, o);
    const run = await _start(ctx, o);
    const base = join(o.out, reportBaseName(run.report));
    checkOutputs(["md", "json", "csv", "svg"].map((ext) => `${base}.${ext}`));
    const progress = new Progress({ label: "table3", total: run.order.size - run.rows.length });
    const say = (s: string) => progress.log(s);
    say(_intro(ctx, o, run));
    const keeper = new _Keeper(run, o.out, say);
    keeper.listen();
    try {
      let inputBytes: number;
      ({ ctx, inputBytes } = await _measure(ctx, o, run, keeper, progress));
      if (keeper.stopping) await new Promise(() => {}); // the signal handler writes and exits
      run.report.complete = true;
      const paths = await keeper.save(true);
      progress.finish();
      if (o.history !== undefined) say(upsertReportHistory(o.history, run.report, paths.json));
      const md = formatMarkdown(run.report);
      console.log(md.slice(0, md.indexOf("\n## Details")).trimEnd());
      const failed = run.rows.filter(failedAtRunTime).length;
      say(
        `${failed === 0 ? "all cells measured" : `${failed} of ${run.rows.length} cells failed`}` +
          `; ${run.report.durationS!.toFixed(1)} s; inputs ${formatMiB(inputBytes)}; wrote ` +
          `${paths.md}, ${paths.json}, ${paths.csv}, ${paths.svg}`,
      );
      return failed === 0 ? 0 : 1;
    } finally {
      keeper.close();
    }
  } finally {
    ctx.destroy();
  }
}

function _checkResumeAdapter(ctx: GpuContext, o: Table3RunOptions): void {
  const prior = o.resume?.report;
  if (!prior) return;
  const a = prior.env.adapter;
  if (
    a.description !== ctx.report.description ||
    a.isFallbackAdapter !== ctx.report.isFallbackAdapter || (a.engine ?? "deno") !== ctx.engine
  ) {
    throw new InputError(
      `--resume ${o.resume!.path}: measured on ${a.description} (${a.engine ?? "deno"}), ` +
        `this adapter is ${ctx.report.description} (${ctx.engine})`,
    );
  }
}

/** Measures the missing cells, saving the JSON after each. */
async function _measure(
  ctx: GpuContext,
  o: Table3RunOptions,
  run: _Run,
  keeper: _Keeper,
  progress: Progress,
): Promise<{ ctx: GpuContext; inputBytes: number }> {
  const { shape } = run.report;
  const say = (s: string) => progress.log(s);
  keeper.saveJson();
  if (keeper.writeError) throw keeper.writeError;
  return await measureCells(ctx, {
    openContext: o.open,
    async openInputs(c) {
      const x = await makeDeviceInputs(c, { fixture: o.fixture, ...shape, seed: o.seed });
      say(`inputs (${x.generator}) ready in ${(x.ms / 1000).toFixed(1)} s`);
      run.report.generator = x.generator;
      return x;
    },
    inputNeed: inputNeed({ fixture: o.fixture, ...shape }),
    spec: shape,
    sections: o.sections,
    methods: o.methods,
    modes: o.modes,
    ...run.repetitions,
    measured: (method, beta, mode) => run.have.has(cellKey(method, beta, mode)),
    onRow(row, ms) {
      run.rows.push(row);
      run.have.add(cellKey(row.method, row.beta, row.mode));
      keeper.saveJson();
      const cell = [formatCell(row), checkText(row)].filter((x) => x).join(", ");
      const bad = row.error !== undefined || isIncorrect(row);
      progress.step(
        `[${run.have.size}/${run.order.size}] ${row.method} β=${row.beta} ${row.mode}: ` +
          `${bad ? paint("red", cell) : cell} (${(ms / 1000).toFixed(1)} s)`,
      );
    },
    afterMethod() {
      if (keeper.writeError) throw keeper.writeError;
    },
    progress: say,
    checks: run.checks,
    timeSource: o.timeSource,
  });
}
