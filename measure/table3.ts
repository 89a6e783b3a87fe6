/**
 * The Table 3 measuring loop: every cell (method × β × mode) of one problem measured with
 * {@link measureMethod}, on inputs made once and remade on a fresh context after a device loss;
 * the problem sizes and repetitions a table and a sweep default to.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import type { Dtype, LceOptions, Reduction } from "../core/options.ts";
import type { LceMethod } from "../methods/types.ts";
import { gradValues, uploadGradOut } from "../methods/run.ts";
import type { CheckRun, CorrectnessCheck } from "./check.ts";
import {
  cellNeed,
  IDLE_GPU_WARMUP_MS,
  measureMethod,
  type MeasureRow,
  type Mode,
  type TimeSource,
} from "./measure.ts";
import type { DeviceInputs } from "./inputs.ts";
import { type FreeMemory, freeMemory, gpuBudget, type MemoryNeed, whyNotFit } from "./memory.ts";

/** The problem of a table. */
export interface Table3Shape {
  n: number;
  v: number;
  d: number;
  dtype: Dtype;
}

/** The cells a run measures and how; a resumed run must match it. */
export interface Table3Plan {
  shape: Table3Shape;
  fixture: string;
  seed: number;
  betas: number[];
  methods: string[];
  modes: Mode[];
  reduction: Reduction;
  warmup: number;
  reps: number;
}

/** The paper's shape (Table 3): N = 8192 tokens, |V| = 256,000, D = 2304, bf16. */
export const PAPER_SHAPE: Table3Shape = { n: 8192, v: 256000, d: 2304, dtype: "bf16" };

/**
 * The default shape on a software adapter (Mesa llvmpipe at ~5–10 GFLOP/s on 2 cores): the whole
 * table — every method, both β, three modes, {@link SOFTWARE_REPS} repetitions after
 * {@link SOFTWARE_WARMUP} warm-up — in a few minutes.
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

/**
 * The shape a run measures: the sizes given, the rest from the paper's shape on hardware and from
 * {@link SOFTWARE_SHAPE} on a software adapter; `reduced` when a software default was taken.
 */
export function defaultShape(
  software: boolean,
  given: { n?: number; v?: number; d?: number; dtype: Dtype },
): { shape: Table3Shape; reduced: boolean } {
  const def = software ? SOFTWARE_SHAPE : PAPER_SHAPE;
  const shape = {
    n: given.n ?? def.n,
    v: given.v ?? def.v,
    d: given.d ?? def.d,
    dtype: given.dtype,
  };
  const reduced = software &&
    (given.n === undefined || given.v === undefined || given.d === undefined);
  return { shape, reduced };
}

/** The key of a cell: method, β and mode. */
export function cellKey(method: string, beta: number, mode: Mode): string {
  return `${method}|${beta}|${mode}`;
}

/** Every cell of a plan in table order (β, then method, then mode) with its rank. */
export function cellOrder(plan: Pick<Table3Plan, "betas" | "methods" | "modes">) {
  const order = new Map<string, number>();
  for (const beta of plan.betas) {
    for (const m of plan.methods) {
      for (const mode of plan.modes) order.set(cellKey(m, beta, mode), order.size);
    }
  }
  return order;
}

/** Options of {@link measureCells}. */
export interface MeasureCellsOptions extends Repetitions {
  /** Opens a fresh context (after a device loss). */
  openContext: () => Promise<GpuContext>;
  /** Uploads the inputs to a context. */
  openInputs: (ctx: GpuContext) => Promise<DeviceInputs>;
  /** What the inputs need before they are made (measure/inputs.ts inputNeed). */
  inputNeed: MemoryNeed;
  /** The memory free now (default measure/memory.ts freeMemory). */
  free?: (ctx: GpuContext) => Promise<FreeMemory>;
  spec: Table3Shape;
  /** The loss options of each β section, in order (resolveOptions). */
  sections: readonly LceOptions[];
  methods: readonly LceMethod[];
  modes: readonly Mode[];
  /** Whether a cell was measured already (a resumed run): it is not measured again. */
  measured: (method: string, beta: number, mode: Mode) => boolean;
  /** Each row as soon as it is measured. */
  onRow: (row: MeasureRow, ms: number) => void;
  /** Called after each method (may throw to stop the run). */
  afterMethod?: () => void;
  /** Progress lines. */
  progress?: (line: string) => void;
  /** Checks every cell against a reference made once per set of inputs (measure/check.ts). */
  checks?: CheckRun;
  /** See MeasureOptions.timeSource. */
  timeSource?: TimeSource;
}

/**
 * Measures every cell not yet measured, β by β, method by method. Before a method, each of its
 * cells' needs (its estimate, and the inputs while they are still to be made) is checked against
 * the free memory: a cell that cannot fit gets an `OOM:` row naming the sizes without anything
 * being allocated for it, and the others run capped at the free memory. A device lost during a
 * method marks that method's remaining cells (`device lost: …`, see measureMethod) and the next
 * method runs on a fresh context with fresh inputs. Returns the context in use at the end (the
 * caller destroys it) and the bytes of its inputs; the inputs are destroyed.
 */
export async function measureCells(
  ctx: GpuContext,
  o: MeasureCellsOptions,
): Promise<{ ctx: GpuContext; inputBytes: number }> {
  let inputs: DeviceInputs | undefined;
  let check: CorrectnessCheck | undefined, checked = false;
  let inputBytes = 0;
  for (const opts of o.sections) {
    for (const method of o.methods) {
      let missing = o.modes.filter((m) => !o.measured(method.name, opts.beta, m));
      if (missing.length === 0) continue;
      if (ctx.lostReason) {
        o.progress?.(`device lost (${ctx.lostReason}); opening a new one`);
        ctx = await o.openContext();
        inputs = undefined;
      }
      const free = await (o.free ?? freeMemory)(ctx);
      missing = missing.filter((mode) => {
        const need = cellNeed(method, o.spec, opts, mode, inputs ? undefined : o.inputNeed);
        const why = whyNotFit(need, free, `${method.name} ${mode}`);
        if (why !== undefined) o.onRow(refusedRow(method, opts.beta, mode, o, `OOM: ${why}`), 0);
        return why === undefined;
      });
      if (missing.length === 0) continue;
      if (!inputs) {
        inputs = await o.openInputs(ctx);
        inputBytes = ctx.memory().liveBytes;
        if (o.checks && !checked) {
          // one reference for every section: it does not depend on β (measure/check.ts)
          checked = true;
          check = await o.checks.prepare(ctx, inputs.inputs, {
            softcap: opts.softcap,
            ignoreIndex: opts.ignoreIndex,
            gradOut: gradValues(o.spec.n, opts),
          });
        }
      }
      // the inputs just made took their part of the free memory
      const budget = gpuBudget(await (o.free ?? freeMemory)(ctx));
      await _measureOne(ctx, method, opts, missing, inputs, budget, o, check);
      o.afterMethod?.();
    }
  }
  if (!ctx.lostReason) inputs?.destroy();
  return { ctx, inputBytes };
}

async function _measureOne(
  ctx: GpuContext,
  method: LceMethod,
  opts: LceOptions,
  modes: Mode[],
  inputs: DeviceInputs,
  budget: number,
  o: MeasureCellsOptions,
  check: CorrectnessCheck | undefined,
): Promise<void> {
  const gradOut = uploadGradOut(ctx, o.spec.n, opts);
  try {
    await measureMethod(ctx, method, {
      spec: o.spec,
      opts,
      inputs: inputs.inputs,
      gradOut,
      modes,
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
      timeSource: o.timeSource,
      check,
    });
  } finally {
    if (!ctx.lostReason) gradOut.destroy();
  }
}

/** An error row of `method` for a cell that was not measured at all (refused or failed early). */
export function refusedRow(
  method: Pick<LceMethod, "name" | "label" | "arithmetic">,
  beta: number,
  mode: Mode,
  r: Pick<Repetitions, "reps" | "warmup">,
  error: string,
): MeasureRow {
  return {
    method: method.name,
    label: method.label,
    ...(method.arithmetic !== undefined ? { arithmetic: method.arithmetic } : {}),
    beta,
    mode,
    peakBytes: null,
    timeMs: null,
    timeSource: "wall",
    timeMsMin: null,
    timeMsMax: null,
    timeMsIqr: null,
    wallMsMedian: null,
    reps: r.reps,
    warmup: r.warmup,
    peakByRole: null,
    stats: null,
    error,
  };
}
