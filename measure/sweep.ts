/**
 * A scaling sweep: the methods measured at several values of one size (|V|, N or D) with the
 * others fixed, one {@link measureMethod} per value × β × method. Every failure stays in its cell:
 * a method that fails at a size (out of memory, limits, device lost) gives error rows there and
 * the sweep goes on; inputs that cannot be made at a size give error rows for every method there.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { type LceOptions, type Reduction, resolveOptions } from "../core/options.ts";
import { oneLine } from "../core/errors.ts";
import type { LceMethod, ProblemSpec } from "../methods/types.ts";
import { uploadGradOut } from "../methods/run.ts";
import {
  cellNeed,
  IDLE_GPU_WARMUP_MS,
  measureMethod,
  type MeasureRow,
  type Mode,
} from "./measure.ts";
import { type DeviceInputs, inputNeed, makeDeviceInputs } from "./inputs.ts";
import { type FreeMemory, freeMemory, gpuBudget, whyNotFit } from "./memory.ts";
import { refusedRow } from "./table3.ts";

/** The size a sweep varies. */
export type SweepAxis = "n" | "v" | "d";
/** All sweep axes. */
export const SWEEP_AXES: readonly SweepAxis[] = ["n", "v", "d"];

/** What a sweep measures. */
export interface SweepPlan {
  /** The swept size. */
  over: SweepAxis;
  /** Its values, measured in this order. */
  values: readonly number[];
  /** The fixed sizes (the swept one is replaced by each value) and the dtype. */
  base: ProblemSpec;
  betas: readonly number[];
  methods: readonly LceMethod[];
  modes: readonly Mode[];
  fixture: string;
  seed: number;
  reduction: Reduction;
  reps: number;
  warmup: number;
  /** Repeat each cell until this much time is measured (at least `reps`; see MeasureOptions). */
  targetMs?: number;
  /** Most repetitions with `targetMs`. */
  maxReps?: number;
  /** See MeasureOptions.warmFwdBwd. */
  warmFwdBwd?: boolean;
}

/** One measured (or failed) cell: a method × β × mode at one value of the swept size. */
export interface SweepCell {
  /** The swept size's value. */
  x: number;
  /** The whole problem of the cell. */
  shape: ProblemSpec;
  /** The measurement (with raw samples), or the failure in `row.error`. */
  row: MeasureRow;
}

/** Callbacks of {@link runSweep}. */
export interface SweepHooks {
  /** Called with every cell as soon as it is known (write the JSON here), and its duration. */
  onCell(cell: SweepCell, ms: number): void;
  /** A line of progress that is not a cell (inputs made, device reopened). */
  onNote?(text: string): void;
  /** Opens a new context after a device loss (default: the sweep's cells fail from then on). */
  reopen?(): Promise<GpuContext>;
  /** The memory free now (default measure/memory.ts freeMemory). */
  free?(ctx: GpuContext): Promise<FreeMemory>;
  /**
   * A cell measured before (a resumed run), or undefined to measure it: a cell returned here is
   * passed to onCell again and not measured; a value whose cells all come from here needs no
   * inputs.
   */
  done?(x: number, beta: number, method: string, mode: Mode): SweepCell | undefined;
}

/** The problem at value `x` of the swept size. */
export function sweepShape(plan: Pick<SweepPlan, "over" | "base">, x: number): ProblemSpec {
  return { ...plan.base, [plan.over]: x };
}

/** Relative cost of a cell, for the estimate of the time left: n·v·d × (1, 2, 3 by mode). */
export function cellWeight(shape: ProblemSpec, mode: Mode): number {
  const modeCost = mode === "fwd" ? 1 : mode === "bwd" ? 2 : 3;
  return shape.n * shape.v * shape.d * modeCost;
}

/** Total weight of a plan (see {@link cellWeight}). */
export function planWeight(plan: SweepPlan): number {
  let w = 0;
  for (const x of plan.values) {
    for (const mode of plan.modes) w += cellWeight(sweepShape(plan, x), mode);
  }
  return w * plan.betas.length * plan.methods.length;
}

/**
 * Measures `plan` on `ctx` and returns every cell, values in order, then β, method and mode; the
 * returned context is the one in use at the end (a new one after a device loss). At each value,
 * a cell whose need (inputs, the method's estimate) exceeds the free memory gets an `OOM:` row
 * before anything is allocated, and a value none of whose cells can run makes no inputs. Throws
 * only for bad options (InputError from measureMethod).
 */
export async function runSweep(
  ctx: GpuContext,
  plan: SweepPlan,
  hooks: SweepHooks,
): Promise<{ cells: SweepCell[]; ctx: GpuContext }> {
  const cells: SweepCell[] = [];
  const emit = (cell: SweepCell, ms: number) => {
    cells.push(cell);
    hooks.onCell(cell, ms);
  };
  for (const x of plan.values) {
    const shape = sweepShape(plan, x);
    const known = (beta: number, method: LceMethod, mode: Mode) =>
      hooks.done?.(x, beta, method.name, mode);
    if (ctx.lostReason && hooks.reopen) {
      hooks.onNote?.(`device lost (${ctx.lostReason}); opening a new one`);
      ctx = await hooks.reopen();
    }
    const refused = await _refused(ctx, plan, x, hooks, known);
    const runs = plan.betas.some((b) =>
      plan.methods.some((m) =>
        plan.modes.some((mode) => !known(b, m, mode) && !refused.has(_key(b, m, mode)))
      )
    );
    const put = (beta: number, method: LceMethod, mode: Mode) => {
      const cell = known(beta, method, mode);
      const why = refused.get(_key(beta, method, mode));
      if (cell) emit(cell, 0);
      else if (why !== undefined) {
        emit({ x, shape, row: failedRow(method, beta, mode, plan, why) }, 0);
      }
      return cell === undefined && why === undefined;
    };
    if (!runs) {
      for (const b of plan.betas) {
        for (const m of plan.methods) for (const mode of plan.modes) put(b, m, mode);
      }
      continue;
    }
    ctx = await _measureValue(ctx, plan, x, hooks, put, emit);
  }
  return { cells, ctx };
}

function _key(beta: number, method: LceMethod, mode: Mode): string {
  return `${beta}|${method.name}|${mode}`;
}

/** The cells of value `x` that cannot fit the free memory (with the inputs), and why. */
async function _refused(
  ctx: GpuContext,
  plan: SweepPlan,
  x: number,
  hooks: SweepHooks,
  known: (beta: number, method: LceMethod, mode: Mode) => SweepCell | undefined,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const shape = sweepShape(plan, x);
  const todo = plan.betas.some((b) =>
    plan.methods.some((m) => plan.modes.some((mode) => !known(b, m, mode)))
  );
  if (!todo) return out;
  const free = await (hooks.free ?? freeMemory)(ctx);
  const inputs = inputNeed({ ...shape, fixture: plan.fixture });
  for (const beta of plan.betas) {
    const opts = resolveOptions({ beta, reduction: plan.reduction });
    for (const method of plan.methods) {
      for (const mode of plan.modes) {
        if (known(beta, method, mode)) continue;
        const need = cellNeed(method, shape, opts, mode, inputs);
        const why = whyNotFit(need, free, `${method.name} ${mode} at ${plan.over} = ${x}`);
        if (why !== undefined) out.set(_key(beta, method, mode), `OOM: ${why}`);
      }
    }
  }
  return out;
}

/**
 * Makes the inputs of value `x` and measures its cells; `put` emits a cell known or refused and
 * says whether it is to be measured. Returns the context in use at the end.
 */
async function _measureValue(
  ctx: GpuContext,
  plan: SweepPlan,
  x: number,
  hooks: SweepHooks,
  put: (beta: number, method: LceMethod, mode: Mode) => boolean,
  emit: (cell: SweepCell, ms: number) => void,
): Promise<GpuContext> {
  const shape = sweepShape(plan, x);
  let inputs: DeviceInputs;
  try {
    inputs = await ctx.scoped(() =>
      makeDeviceInputs(ctx, { fixture: plan.fixture, ...shape, seed: plan.seed })
    );
  } catch (e) {
    for (const beta of plan.betas) {
      for (const method of plan.methods) {
        for (const mode of plan.modes) {
          if (!put(beta, method, mode)) continue;
          emit({ x, shape, row: failedRow(method, beta, mode, plan, `inputs: ${oneLine(e)}`) }, 0);
        }
      }
    }
    return ctx;
  }
  hooks.onNote?.(
    `${plan.over} = ${x}: inputs (${inputs.generator}) ready in ${(inputs.ms / 1000).toFixed(1)} s`,
  );
  try {
    for (const beta of plan.betas) {
      const opts = resolveOptions({ beta, reduction: plan.reduction });
      for (const method of plan.methods) {
        const todo = plan.modes.filter((mode) => put(beta, method, mode));
        if (todo.length === 0) continue;
        const budget = gpuBudget(await (hooks.free ?? freeMemory)(ctx));
        await _measureMethodAt(ctx, plan, { shape, method, opts, modes: todo, inputs, budget }, (
          row,
          ms,
        ) => emit({ x, shape, row }, ms));
      }
    }
  } finally {
    inputs.destroy();
  }
  return ctx;
}

/** One method's modes at one value. */
async function _measureMethodAt(
  ctx: GpuContext,
  plan: SweepPlan,
  c: {
    shape: ProblemSpec;
    method: LceMethod;
    opts: LceOptions;
    modes: Mode[];
    inputs: DeviceInputs;
    budget: number;
  },
  onRow: (row: MeasureRow, ms: number) => void,
): Promise<void> {
  const { shape, method, opts, modes, inputs, budget } = c;
  const gradOut = uploadGradOut(ctx, shape.n, opts);
  try {
    await measureMethod(ctx, method, {
      spec: shape,
      opts,
      inputs: inputs.inputs,
      gradOut,
      modes,
      warmup: plan.warmup,
      reps: plan.reps,
      ...(plan.targetMs !== undefined ? { targetMs: plan.targetMs, maxReps: plan.maxReps } : {}),
      warmFwdBwd: plan.warmFwdBwd,
      // the GPU idled while the inputs were made and the method compiled: full load first,
      // short first cells warm it up for longer
      warmupMs: ctx.report.isFallbackAdapter ? undefined : IDLE_GPU_WARMUP_MS,
      busyLoad: !ctx.report.isFallbackAdapter,
      budgetBytes: budget,
      onRow,
    });
  } finally {
    gradOut.destroy();
  }
}

/** An error row of `method` (for cells that could not be measured at all). */
export function failedRow(
  method: Pick<LceMethod, "name" | "label">,
  beta: number,
  mode: Mode,
  plan: Pick<SweepPlan, "reps" | "warmup">,
  error: string,
): MeasureRow {
  return refusedRow(method, beta, mode, plan, error);
}
