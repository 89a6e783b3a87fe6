/**
 * A scaling sweep: the methods measured at several values of one size (|V|, N or D) with the
 * others fixed, one {@link measureMethod} per value × β × method. Every failure stays in its cell:
 * a method that fails at a size (out of memory, limits, device lost) gives error rows there and
 * the sweep goes on; inputs that cannot be made at a size give error rows for every method there.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { type Reduction, resolveOptions } from "../core/options.ts";
import { oneLine } from "../core/errors.ts";
import type { LceMethod, ProblemSpec } from "../methods/types.ts";
import { gradValues, uploadGradOut } from "../methods/run.ts";
import type { CheckRun } from "./check.ts";
import {
  defaultMemoryBudget,
  IDLE_GPU_WARMUP_MS,
  measureMethod,
  type MeasureRow,
  type Mode,
} from "./measure.ts";
import { type DeviceInputs, makeDeviceInputs } from "./inputs.ts";

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
  /** The memory budget above the inputs at a value (default {@link defaultMemoryBudget}). */
  budgetBytes?(ctx: GpuContext, inputBytes: number): number;
  /**
   * A cell measured before (a resumed run), or undefined to measure it: a cell returned here is
   * passed to onCell again and not measured; a value whose cells all come from here needs no
   * inputs.
   */
  done?(x: number, beta: number, method: string, mode: Mode): SweepCell | undefined;
  /** Checks every cell against a reference made once per value (measure/check.ts). */
  checks?: CheckRun;
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
 * returned context is the one in use at the end (a new one after a device loss). Throws only
 * for bad options (InputError from measureMethod).
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
    const failValue = (why: string) => {
      for (const beta of plan.betas) {
        for (const method of plan.methods) {
          for (const mode of plan.modes) {
            emit({ x, shape, row: failedRow(method, beta, mode, plan, why) }, 0);
          }
        }
      }
    };
    const known = (beta: number, method: LceMethod, mode: Mode) =>
      hooks.done?.(x, beta, method.name, mode);
    if (
      plan.betas.every((b) =>
        plan.methods.every((m) => plan.modes.every((mode) => known(b, m, mode)))
      )
    ) {
      for (const b of plan.betas) {
        for (const m of plan.methods) for (const mode of plan.modes) emit(known(b, m, mode)!, 0);
      }
      continue;
    }
    if (ctx.lostReason && hooks.reopen) {
      hooks.onNote?.(`device lost (${ctx.lostReason}); opening a new one`);
      ctx = await hooks.reopen();
    }
    let inputs: DeviceInputs;
    try {
      inputs = await ctx.scoped(() =>
        makeDeviceInputs(ctx, { fixture: plan.fixture, ...shape, seed: plan.seed })
      );
    } catch (e) {
      failValue(`inputs: ${oneLine(e)}`);
      continue;
    }
    hooks.onNote?.(
      `${plan.over} = ${x}: inputs (${inputs.generator}) ready in ${
        (inputs.ms / 1000).toFixed(1)
      } s`,
    );
    const inputBytes = ctx.memory().liveBytes;
    const budget = hooks.budgetBytes?.(ctx, inputBytes) ?? defaultMemoryBudget(ctx);
    try {
      // one reference per value, for every β (it does not depend on β)
      const first = resolveOptions({ beta: plan.betas[0], reduction: plan.reduction });
      const check = await hooks.checks?.prepare(ctx, inputs.inputs, {
        softcap: first.softcap,
        ignoreIndex: first.ignoreIndex,
        gradOut: gradValues(shape.n, first),
      });
      for (const beta of plan.betas) {
        const opts = resolveOptions({ beta, reduction: plan.reduction });
        for (const method of plan.methods) {
          const todo = plan.modes.filter((mode) => {
            const cell = known(beta, method, mode);
            if (cell) emit(cell, 0);
            return !cell;
          });
          if (todo.length === 0) continue;
          const gradOut = uploadGradOut(ctx, shape.n, opts);
          try {
            await measureMethod(ctx, method, {
              spec: shape,
              opts,
              inputs: inputs.inputs,
              gradOut,
              modes: todo,
              warmup: plan.warmup,
              reps: plan.reps,
              ...(plan.targetMs !== undefined
                ? { targetMs: plan.targetMs, maxReps: plan.maxReps }
                : {}),
              warmFwdBwd: plan.warmFwdBwd,
              // the GPU idled while the inputs were made and the method compiled: full load
              // first, short first cells warm it up for longer
              warmupMs: ctx.report.isFallbackAdapter ? undefined : IDLE_GPU_WARMUP_MS,
              busyLoad: !ctx.report.isFallbackAdapter,
              budgetBytes: budget,
              onRow: (row, ms) => emit({ x, shape, row }, ms),
              check,
            });
          } finally {
            gradOut.destroy();
          }
        }
      }
    } finally {
      inputs.destroy();
    }
  }
  return { cells, ctx };
}

/** An error row of `method` (for cells that could not be measured at all). */
export function failedRow(
  method: Pick<LceMethod, "name" | "label">,
  beta: number,
  mode: Mode,
  plan: Pick<SweepPlan, "reps" | "warmup">,
  error: string,
): MeasureRow {
  return {
    method: method.name,
    label: method.label,
    beta,
    mode,
    peakBytes: null,
    timeMs: null,
    timeSource: "wall",
    timeMsMin: null,
    timeMsMax: null,
    timeMsIqr: null,
    wallMsMedian: null,
    reps: plan.reps,
    warmup: plan.warmup,
    peakByRole: null,
    stats: null,
    error,
  };
}
