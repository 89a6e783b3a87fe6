/**
 * A sweep run: opens the adapter, measures the plan (measure/sweep.ts) and keeps its JSON and CSV
 * on disk after every cell, the charts at the end (report/sweep.ts). With `resume`, the cells an
 * earlier run of the same sweep left in the directory are kept: those measured without error are
 * not measured again, and every earlier cell stays in the files until a new measurement of it
 * replaces it, so the files never hold fewer cells than before, wherever the run is stopped.
 * Exit codes: 0 every cell measured, 1 some cell failed (a gap in the charts, its reason in the
 * JSON; cells a method does not support do not count); bad input throws an InputError first.
 * @module
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { checkOutputDir, checkOutputs } from "../io/outputs.ts";
import { checkReportSource } from "./provenance.ts";
import { check, InputError } from "../core/errors.ts";
import { formatDuration, paint, Progress } from "../core/progress.ts";
import type { Dtype, Reduction } from "../core/options.ts";
import type { GpuContext } from "../gpu/context.ts";
import type { LceMethod } from "../methods/types.ts";
import { failedAtRunTime, type Mode } from "../measure/measure.ts";
import {
  cellWeight,
  planWeight,
  runSweep,
  SWEEP_AXES,
  type SweepAxis,
  type SweepCell,
  type SweepPlan,
} from "../measure/sweep.ts";
import { defaultRepetitions, PAPER_SHAPE, repsText, SOFTWARE_SHAPE } from "../measure/table3.ts";
import type { ExternalRows } from "./external.ts";
import { collectEnv, formatCell, METHOD_ORDER } from "./table3.ts";
import {
  externalMatches,
  sweepBaseName,
  type SweepReport,
  writeSweepData,
  writeSweepReport,
} from "./sweep.ts";

/** What a sweep measures and where it writes (the validated command line). */
export interface SweepRunOptions {
  over: SweepAxis;
  /** The swept size's values (default: four doublings ending at the default size). */
  values?: number[];
  /** The fixed sizes given; the others default to the adapter's. */
  fixed: Partial<Record<SweepAxis, number>>;
  dtype: Dtype;
  betas: number[];
  external: ExternalRows[];
  methods: LceMethod[];
  modes: Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps?: number;
  warmup?: number;
  out: string;
  /** Write into the committed reports folder from a tree with uncommitted changes (marked). */
  allowDirty?: boolean;
  resume: boolean;
  /** Opens a context (again after a device loss). */
  open: () => Promise<GpuContext>;
}

/** Four doublings ending at `top` (rounded to integers): 32000, 64000, 128000, 256000. */
export function defaultValues(top: number): number[] {
  return [8, 4, 2, 1].map((k) => Math.max(1, Math.round(top / k)));
}

/** The key of a cell: value, β, method, mode. */
function _key(x: number, beta: number, method: string, mode: Mode): string {
  return `${x}|${beta}|${method}|${mode}`;
}

const _cellKey = (c: SweepCell) => _key(c.x, c.row.beta, c.row.method, c.row.mode);

/** The plan and the (empty) report of a sweep on `ctx`. */
async function _start(ctx: GpuContext, o: SweepRunOptions, say: (s: string) => void) {
  const software = ctx.report.isFallbackAdapter;
  const def = software ? SOFTWARE_SHAPE : PAPER_SHAPE;
  const base = {
    n: o.fixed.n ?? def.n,
    v: o.fixed.v ?? def.v,
    d: o.fixed.d ?? def.d,
    dtype: o.dtype,
  };
  const values = o.values ?? defaultValues(def[o.over]);
  base[o.over] = values[0];
  const reduced = software && SWEEP_AXES.some((k) => k !== o.over && o.fixed[k] === undefined);
  const repetitions = defaultRepetitions(software, o);
  const plan: SweepPlan = {
    over: o.over,
    values,
    base,
    betas: o.betas,
    methods: o.methods,
    modes: o.modes,
    fixture: o.fixture,
    seed: o.seed,
    reduction: o.reduction,
    // as table3: on hardware without --reps, each cell repeats until 0.6 s is measured (3 to 20)
    ...repetitions,
  };
  const external = o.external.filter((x) => {
    const ok = externalMatches(x, plan);
    if (!ok) {
      say(
        `ignoring ${x.source}: shape ${x.shape.n}×${x.shape.v}×${x.shape.d} does not match the ` +
          `fixed sizes`,
      );
    }
    return ok;
  });
  const report: SweepReport = {
    env: await collectEnv(ctx),
    over: o.over,
    values,
    base,
    fixture: o.fixture,
    seed: o.seed,
    betas: o.betas,
    modes: o.modes,
    methods: o.methods.map((m) => ({ name: m.name, label: m.label })),
    reduction: o.reduction,
    warmup: repetitions.warmup,
    reps: repetitions.reps,
    timeSource: ctx.hasTimestamps ? "gpu" : "wall",
    reducedShape: reduced
      ? `The paper's shape would take hours on the software adapter ${ctx.report.description}, ` +
        `so the fixed sizes default to table3's reduced shape ` +
        `${SOFTWARE_SHAPE.n} × ${SOFTWARE_SHAPE.v} × ${SOFTWARE_SHAPE.d}.`
      : undefined,
    complete: false,
    cells: [],
    external: external.length > 0 ? external : undefined,
  };
  return { plan, report, repetitions, reduced };
}

/**
 * The report file of an earlier run of the same sweep (same swept size, fixed sizes, dtype,
 * fixture, seed, reduction, repetitions and warm-up) in `dir`, or undefined when there is none;
 * InputError when the file there belongs to another sweep.
 */
export function previousSweep(r: SweepReport, dir: string): SweepReport | undefined {
  const path = join(dir, `${sweepBaseName(r)}.json`);
  if (!existsSync(path)) return undefined;
  let old: SweepReport;
  try {
    old = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(`--resume: cannot read ${path}: ${(e as Error).message.split("\n")[0]}`);
  }
  check(
    old !== null && typeof old === "object" && Array.isArray(old.cells),
    `--resume: ${path} is not a sweep report (no cells)`,
  );
  const same = (k: string, a: unknown, b: unknown) =>
    check(
      JSON.stringify(a) === JSON.stringify(b),
      `--resume: ${path} was measured with another ${k} (${JSON.stringify(a)}, now ${
        JSON.stringify(b)
      }); give another --out or drop --resume`,
    );
  same("swept size", old.over, r.over);
  for (const k of SWEEP_AXES) if (k !== r.over) same(k, old.base?.[k], r.base[k]);
  same("dtype", old.base?.dtype, r.base.dtype);
  same("fixture", old.fixture, r.fixture);
  same("seed", old.seed, r.seed);
  same("reduction", old.reduction, r.reduction);
  same("reps", old.reps, r.reps);
  same("warmup", old.warmup, r.warmup);
  return old;
}

/**
 * The report's cells, values and methods with an earlier run's merged in: every earlier cell is
 * kept (until measured again), the values and methods the earlier run had are added.
 */
function _keepEarlier(report: SweepReport, old: SweepReport): void {
  report.cells = [...old.cells];
  report.values = [...new Set([...report.values, ...(old.values ?? [])])];
  const names = new Set(report.methods.map((m) => m.name));
  for (const m of old.methods ?? []) if (!names.has(m.name)) report.methods.push(m);
  report.generator ??= old.generator;
}

/** A cell into the report: in place of the earlier cell of the same key, else added. */
function _putCell(report: SweepReport, cell: SweepCell): void {
  const k = _cellKey(cell);
  const i = report.cells.findIndex((c) => _cellKey(c) === k);
  if (i >= 0) report.cells[i] = cell;
  else report.cells.push(cell);
}

/** Cells in the sweep's order: value, then β, method (the paper's order) and mode. */
function _sortCells(report: SweepReport): void {
  const rank = <T>(xs: readonly T[], x: T) => {
    const i = xs.indexOf(x);
    return i < 0 ? xs.length : i;
  };
  const methods = report.methods.map((m) => m.name);
  report.cells.sort((a, b) =>
    a.x - b.x || rank(report.betas, a.row.beta) - rank(report.betas, b.row.beta) ||
    rank(METHOD_ORDER, a.row.method) - rank(METHOD_ORDER, b.row.method) ||
    rank(methods, a.row.method) - rank(methods, b.row.method) ||
    rank(["fwd", "bwd", "fwd+bwd"], a.row.mode) - rank(["fwd", "bwd", "fwd+bwd"], b.row.mode)
  );
  report.values.sort((a, b) => a - b);
}

/** Runs the sweep; returns the exit code (0 every cell measured, 1 some cell failed). */
export async function runSweepReport(o: SweepRunOptions): Promise<number> {
  const started = performance.now();
  checkOutputDir(o.out, `--out ${o.out}`);
  await checkReportSource(o.out, { allowDirty: o.allowDirty ?? false });
  let ctx = await o.open();
  try {
    const progress0: string[] = [];
    const { plan, report, repetitions, reduced } = await _start(ctx, o, (s) => progress0.push(s));
    const base = join(o.out, sweepBaseName(report));
    checkOutputs([".csv", ".json", "_time.svg", "_memory.svg"].map((x) => `${base}${x}`));
    const progress = new Progress({ label: "sweep", total: planWeight(plan) });
    progress.log(_intro(ctx, o, plan, repsText(repetitions), reduced));
    for (const line of progress0) progress.log(line);
    const old = o.resume ? previousSweep(report, o.out) : undefined;
    const previous = new Map<string, SweepCell>();
    for (const c of old?.cells ?? []) if (c.row?.error === undefined) previous.set(_cellKey(c), c);
    if (old) _keepEarlier(report, old);
    if (o.resume) progress.log(`resuming: ${previous.size} cells measured before are kept`);
    writeSweepData(report, o.out);
    const total = plan.values.length * o.betas.length * o.methods.length * o.modes.length;
    let count = 0;
    const result = await runSweep(ctx, plan, {
      onCell(cell, ms) {
        _putCell(report, cell);
        report.durationS = (performance.now() - started) / 1000;
        writeSweepData(report, o.out);
        const r = cell.row;
        const text = formatCell(r);
        const resumed = previous.get(_cellKey(cell)) === cell;
        progress.step(
          `[${++count}/${total}] ${o.over}=${cell.x} ${r.method} β=${r.beta} ${r.mode}: ` +
            `${r.error ? paint("red", text) : text} (${
              resumed ? "from the earlier run" : `${(ms / 1000).toFixed(1)} s`
            })`,
          cellWeight(cell.shape, r.mode),
        );
      },
      onNote: (text) => progress.log(text),
      done: (x, beta, method, mode) => previous.get(_key(x, beta, method, mode)),
      reopen: o.open,
    });
    ctx = result.ctx;
    report.complete = true;
    report.durationS = (performance.now() - started) / 1000;
    _sortCells(report);
    const paths = await writeSweepReport(report, o.out);
    progress.finish();
    const failed = report.cells.filter((c) => failedAtRunTime(c.row)).length;
    progress.log(
      `${
        failed === 0 ? "every cell measured" : `${failed} of ${report.cells.length} cells failed`
      }` +
        `; ${formatDuration(report.durationS)}; wrote ${paths.csv}, ${paths.json}, ` +
        `${paths.timeSvg}, ${paths.memorySvg}`,
    );
    return failed === 0 ? 0 : 1;
  } finally {
    ctx.destroy();
  }
}

function _intro(
  ctx: GpuContext,
  o: SweepRunOptions,
  plan: SweepPlan,
  reps: string,
  reduced: boolean,
): string {
  const fixed = SWEEP_AXES.filter((k) => k !== o.over).map((k) => `${k}=${plan.base[k]}`)
    .join(" ");
  const n = o.methods.length;
  return `${ctx.report.description}${ctx.report.isFallbackAdapter ? " (software)" : ""}: ` +
    `${o.over} ∈ {${plan.values.join(", ")}} at ${fixed} ${plan.base.dtype}, fixture ` +
    `${o.fixture}, β ∈ {${o.betas.join(", ")}}, ${n} method${n === 1 ? "" : "s"}, modes ` +
    `${o.modes.join(",")}, ${reps} reps after ${plan.warmup} warm-up` +
    `${reduced ? " (reduced shape)" : ""}`;
}
