/**
 * Measures one method for Table 3: peak GPU memory and time of its forward, its backward and both
 * together, with every failure (out of memory, device loss, limits, unsupported options, leaks)
 * turned into an error row so that a table run goes on.
 *
 * What each mode measures:
 * - `fwd`: the forward call (loss and the state saved for the backward), one Recorder.
 * - `bwd`: the backward call given a saved forward state; the forward runs before, outside the
 *   measurement. The gradients count in its memory, also when the method hands over tensors it
 *   computed in the forward (they are added to the peak).
 * - `fwd+bwd`: the forward then the backward, recorded into one Recorder.
 *
 * peakBytes is the peak of tracked bytes during the call minus the bytes live just before it
 * (inputs, and for `bwd` the saved state and loss): the maximum over the measured repetitions,
 * each starting with {@link GpuContext.resetPeak} (allocation is deterministic, so this equals
 * the first measured repetition's peak). Each repetition is one Recorder, finished (GPU idle)
 * before the next, and frees everything it allocated: live bytes must return to their level
 * before the repetition, otherwise the row reports a leak. Times are medians over the measured
 * repetitions of the GPU time (timestamp queries) or, on an adapter without them, of wall time.
 * @module
 */
import type { BufferRole, GpuContext, TrackedBuffer } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import { type BusyLoad, prepareBusyLoad } from "../gpu/busy_load.ts";
import {
  defaultTimeSource,
  type Mode,
  quantiles,
  type Repetitions,
  timeMode,
  timeRepetitions,
  type TimeSource,
} from "./timing.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { GpuError, InputError, oneLine } from "../core/errors.ts";
import { capAllocations, type MemoryNeed } from "./memory.ts";
import { DTYPE_BYTES, type LceOptions } from "../core/options.ts";
import type { CellCheck, CorrectnessCheck } from "./check.ts";
import type {
  ForwardOutput,
  LceMethod,
  MethodInputs,
  MethodStats,
  PreparedMethod,
  ProblemSpec,
} from "../methods/types.ts";

export { type Mode, MODES, parseModes, type TimeSource } from "./timing.ts";

/** Bytes per buffer role. */
export type RoleBytes = Record<BufferRole, number>;

/**
 * A method's memory estimate for a problem, in bytes above the inputs: one number for every mode
 * (the largest), or one per mode ({@link LceMethod.estimateBytes}); it only serves the pre-flight
 * check, never the reported figures.
 */
export type MemoryEstimate = number | Partial<Record<Mode, number>>;

/** One measured (or failed) cell of the table. */
export interface MeasureRow {
  /** Method name (command line). */
  method: string;
  /** Method label (table). */
  label: string;
  /** The arithmetic of its products ({@link LceMethod.arithmetic}); absent: fp32 FMA (WGSL). */
  arithmetic?: string;
  /** Label smoothing. */
  beta: number;
  mode: Mode;
  /** Peak tracked bytes above the bytes live before the call; null when the row failed. */
  peakBytes: number | null;
  /** Median time in ms ({@link TimeSource}); null when the row failed. */
  timeMs: number | null;
  /** `gpu` (timestamp queries) or `wall` (the adapter has no timestamp-query). */
  timeSource: TimeSource;
  /** Fastest measured repetition, ms. */
  timeMsMin: number | null;
  /** Slowest measured repetition, ms. */
  timeMsMax: number | null;
  /** Interquartile range of the measured repetitions, ms. */
  timeMsIqr: number | null;
  /** Median wall time (recorder creation to completion), ms. */
  wallMsMedian: number | null;
  /** Measured repetitions. */
  reps: number;
  /** Unmeasured repetitions run first. */
  warmup: number;
  /** Peak bytes above the starting level, per role (same repetition as peakBytes). */
  peakByRole: RoleBytes | null;
  /** The method's statistics after the last measured backward (null for fwd or when absent). */
  stats: MethodStats | null;
  /**
   * Median GPU time in ms of each pass label over the measured repetitions (passes sharing a
   * label within one repetition summed); absent without timestamp-query or when the row failed.
   */
  passMs?: Record<string, number>;
  /** Every measured repetition's time in ms ({@link TimeSource}), in run order; absent on failure. */
  timeMsSamples?: number[];
  /** Every measured repetition's peak bytes (same definition as peakBytes); absent on failure. */
  peakBytesSamples?: number[];
  /** Why the row failed: `OOM: needs N MiB …`, `unsupported: …`, `leak: …`, or the message. */
  error?: string;
  /**
   * The method's estimate of the cell's peak bytes above the inputs, checked against the free
   * memory before the cell ran (absent where the method gives none).
   */
  estimateBytes?: number;
  /**
   * The correctness check of the cell's first repetition (measure/check.ts), when the run checks;
   * absent on a failed row.
   */
  check?: CellCheck;
}

/**
 * Whether a row failed at run time (out of memory, device lost, a leak, an error): an error other
 * than `unsupported: …`, which marks a cell the method does not support on this adapter or
 * problem. A run with such rows exits 1.
 */
export function failedAtRunTime(row: Pick<MeasureRow, "error">): boolean {
  return row.error !== undefined && !row.error.startsWith("unsupported:");
}

/**
 * Warm-up wall time (ms) of a method's first mode after the GPU may have idled (while inputs were
 * made or the method's shaders compiled), for cells whose calls are short (timeRepetitions'
 * `warmupMs`): on an H100 a sweep's first small cells ran at up to 2.7× their time (26.3 and
 * 72.3 ms for one product) and the `llm` fixture's 10 ms forwards at 2–5× before the clocks rose.
 */
export const IDLE_GPU_WARMUP_MS = 1000;

/**
 * Wall time (ms) of full load ({@link MeasureOptions.busyLoad}) before each mode of a method: an
 * idle H100's clock reached its 1,980 MHz within 0.1 s of full load, and stayed below about 1 GHz
 * for over a second of short calls that kept it 40–60% busy (gpu/busy_load.ts); 250 ms of
 * submissions that grew from a few ms did not get there. The load runs on past this until its
 * rate settles (gpu/busy_load.ts, `SETTLED_RATE`). Before each mode, not only the first: on an
 * H200 the 25 ms fwd+bwd calls of `llm:zipf=3`, measured after the bwd cell's gradients were
 * checked on the host, ran at 1.2–1.6 GHz instead of 1.98 (every pass 1.5× slow).
 */
export const IDLE_GPU_BUSY_MS = 400;

/**
 * What a cell needs before its method is prepared: on the GPU the method's estimate for the mode
 * (at least the gradients its backward returns, (n + v)·d elements of the input dtype, where the
 * method gives none) and the upstream gradient, plus `inputs` when they are still to be made.
 */
export function cellNeed(
  method: LceMethod,
  spec: ProblemSpec,
  opts: LceOptions,
  mode: Mode,
  inputs?: MemoryNeed,
): MemoryNeed {
  const lowest = mode === "fwd" ? 4 : (spec.n + spec.v) * spec.d * DTYPE_BYTES[spec.dtype];
  const est = estimateFor(methodEstimate(method, spec, opts), mode) ?? lowest;
  const gradOut = opts.reduction === "none" ? spec.n * 4 : 16;
  return {
    hostBytes: inputs?.hostBytes ?? 0,
    gpuBytes: (inputs?.gpuBytes ?? 0) + gradOut + est,
  };
}

/** Options of {@link measureMethod}. */
export interface MeasureOptions {
  /** The problem (shape, dtype of E and C). */
  spec: ProblemSpec;
  /** Loss options (β, reduction, ...). */
  opts: LceOptions;
  /** Inputs already on the GPU. */
  inputs: MethodInputs;
  /** Upstream gradient on the GPU (1×1, or n×1 for reduction none). */
  gradOut: DeviceTensor;
  /** Modes to measure, in this order. */
  modes: readonly Mode[];
  /** Unmeasured repetitions per mode (≥ 0). */
  warmup: number;
  /** Measured repetitions per mode (≥ 1; the least with {@link MeasureOptions.targetMs}). */
  reps: number;
  /**
   * Time per cell to spend on measured repetitions, ms: after the first measured repetition, a
   * cell runs ⌈targetMs / its wall time⌉ repetitions (with any fresh forward it needed), at least
   * `reps` and at most `maxReps`, so fast cells get more repetitions (their spread is larger) and
   * slow ones no fewer than `reps`. Default: exactly `reps`.
   */
  targetMs?: number;
  /**
   * Wall time (ms) the first mode's warm-up lasts at least when its calls are short (more
   * unmeasured repetitions than `warmup` if need be; see timeRepetitions): for a GPU whose clocks
   * an idle spell has lowered ({@link IDLE_GPU_WARMUP_MS}). Default: none.
   */
  warmupMs?: number;
  /**
   * Run gpu/busy_load.ts's full load for {@link IDLE_GPU_BUSY_MS} before each mode (the GPU idled
   * while the method's shaders compiled, and while the last mode's result was checked on the host:
   * its clocks rise with its utilisation). Default false.
   */
  busyLoad?: boolean;
  /** Most measured repetitions with {@link MeasureOptions.targetMs} (default 20). */
  maxReps?: number;
  /**
   * No warm-up for the fwd+bwd cell when this call has just measured the method's fwd and bwd
   * cells: both halves' pipelines have run and their buffers are in the allocator's cache, so a
   * warm-up would only repeat the slowest cell once more (its row says warm-up 0). Default false.
   */
  warmFwdBwd?: boolean;
  /**
   * Bytes the method may use above the bytes live when it starts (the inputs): a mode whose
   * estimate exceeds it is refused with an OOM row before anything is allocated, and no mode may
   * allocate past it (GpuContext.allocationLimitBytes: an allocation past it fails the mode as
   * out of memory). Default: {@link defaultMemoryBudget}.
   */
  budgetBytes?: number;
  /**
   * Freed bytes the context keeps for reuse while the method is measured (default
   * {@link HARDWARE_CACHE_BYTES} / {@link SOFTWARE_CACHE_BYTES}; 0: none).
   */
  cacheBytes?: number;
  /** Called with each row as soon as it is known (progress output). */
  onRow?: (row: MeasureRow, ms: number) => void;
  /**
   * Where times come from (default: GPU timestamps, wall time without them). `cpu`, the process's
   * CPU time, is what a shared software adapter measures most steadily (the gate's choice there).
   */
  timeSource?: TimeSource;
  /**
   * Checks each cell's outputs after its first repetition (a warm-up one when there is one),
   * outside the timed region (measure/check.ts); the row carries the result.
   */
  check?: CorrectnessCheck;
}

/** Freed bytes kept for reuse while a method is measured on a hardware adapter. */
export const HARDWARE_CACHE_BYTES = 20 * 2 ** 30;
/** The same on a software adapter (host memory). */
export const SOFTWARE_CACHE_BYTES = 256 * 2 ** 20;

/** Host RAM of the software adapter's machine is assumed to allow this much GPU memory. */
export const SOFTWARE_BUDGET_BYTES = 8 * 2 ** 30;

/**
 * The pre-flight budget of a context: {@link SOFTWARE_BUDGET_BYTES} on a fallback (software)
 * adapter, unlimited on hardware (WebGPU does not tell the device's memory; failed allocations
 * are caught instead). Callers that know the memory (nvidia-smi) pass their own.
 */
export function defaultMemoryBudget(ctx: GpuContext): number {
  return ctx.report.isFallbackAdapter ? SOFTWARE_BUDGET_BYTES : Infinity;
}

/** Bytes as MiB for messages: `1,161 MiB`, `0.5 MiB`. */
export function formatMiB(bytes: number): string {
  const mib = bytes / 2 ** 20;
  const digits = mib >= 10 ? 0 : mib >= 0.1 ? 1 : 3;
  return `${mib.toLocaleString("en-US", { maximumFractionDigits: digits })} MiB`;
}

/**
 * Measures `method` in every mode of `o.modes` and returns one row per mode, in order. Never
 * throws for a failure of the method: it becomes the row's `error` (see the module doc for the
 * semantics of each mode and of the figures). Throws InputError for bad options.
 */
export async function measureMethod(
  ctx: GpuContext,
  method: LceMethod,
  o: MeasureOptions,
): Promise<MeasureRow[]> {
  if (!Number.isInteger(o.reps) || o.reps < 1) {
    throw new InputError(`reps must be a positive integer, got ${o.reps}`);
  }
  if (!Number.isInteger(o.warmup) || o.warmup < 0) {
    throw new InputError(`warmup must be a non-negative integer, got ${o.warmup}`);
  }
  const rows: MeasureRow[] = [];
  const emit = (row: MeasureRow, t0: number) => {
    rows.push(row);
    o.onRow?.(row, performance.now() - t0);
  };
  const t0 = performance.now();
  const failAll = (error: string) => {
    for (const mode of o.modes) emit(_row(ctx, method, o, mode, { error }), t0);
    return rows;
  };
  if (ctx.lostReason) return failAll(`device lost: ${ctx.lostReason}`);
  let why: string | undefined;
  try {
    why = method.unsupported?.(ctx, o.spec, o.opts);
  } catch (e) {
    why = oneLine(e);
  }
  if (why !== undefined) return failAll(`unsupported: ${why}`);

  const budget = o.budgetBytes ?? defaultMemoryBudget(ctx);
  const limit = ctx.memory().liveBytes + budget;
  let prepared: PreparedMethod;
  try {
    prepared = await ctx.scoped(() => method.prepare(ctx, o.spec, o.opts));
  } catch (e) {
    return failAll(_errorText(e, ctx, undefined));
  }
  const estimate = methodEstimate(method, o.spec, o.opts, prepared);
  // Freed buffers are kept for reuse while this method is measured (GpuContext.cacheLimitBytes:
  // the repetitions of a materialising method would otherwise pay the driver's allocation of
  // gigabytes each time, as PyTorch's caching allocator spares it), and released after it.
  const cacheBefore = ctx.cacheLimitBytes;
  ctx.cacheLimitBytes = o.cacheBytes ??
    (ctx.report.isFallbackAdapter ? SOFTWARE_CACHE_BYTES : HARDWARE_CACHE_BYTES);
  const measured = new Set<Mode>();
  // compiled once per method, on its first mode (a failure is that mode's row)
  let busy: BusyLoad | undefined;
  try {
    for (const mode of o.modes) {
      const t1 = performance.now();
      const warm = o.warmFwdBwd === true && mode === "fwd+bwd" && measured.has("fwd") &&
        measured.has("bwd");
      // no warm-up right after the fwd and bwd; the floor on warm-up time is the first mode's
      const om = {
        ...o,
        warmup: warm ? 0 : o.warmup,
        warmupMs: mode === o.modes[0] ? o.warmupMs : undefined,
      };
      const est = estimateFor(estimate, mode);
      if (est !== undefined && est > budget) {
        emit(
          _row(ctx, method, o, mode, {
            error: `OOM: needs ${formatMiB(est)} (estimated), ${formatMiB(budget)} free`,
          }),
          t1,
        );
        continue;
      }
      if (ctx.lostReason) {
        emit(_row(ctx, method, o, mode, { error: `device lost: ${ctx.lostReason}` }), t1);
        continue;
      }
      try {
        if (o.busyLoad) await (busy ??= await prepareBusyLoad(ctx)).run(IDLE_GPU_BUSY_MS);
        const m = await capAllocations(ctx, limit, () => _measureMode(ctx, prepared, om, mode));
        const row = _row(ctx, method, om, mode, m);
        if (est !== undefined) row.estimateBytes = est;
        emit(row, t1);
        if (!m.error) measured.add(mode);
      } catch (e) {
        emit(_row(ctx, method, o, mode, { error: _errorText(e, ctx, est) }), t1);
      }
    }
  } finally {
    ctx.releaseCache();
    ctx.cacheLimitBytes = cacheBefore;
  }
  prepared.release?.();
  return rows;
}

/** A failure of the leak check. */
class _LeakError extends Error {}

interface _Measured {
  peakBytes?: number;
  peakByRole?: RoleBytes;
  times?: number[];
  walls?: number[];
  peaks?: number[];
  stats?: MethodStats | null;
  passes?: Map<string, number[]>;
  /** Unmeasured repetitions actually run (default: the options' `warmup`). */
  warmups?: number;
  check?: CellCheck;
  error?: string;
}

function _row(
  ctx: GpuContext,
  method: LceMethod,
  o: MeasureOptions,
  mode: Mode,
  m: _Measured,
): MeasureRow {
  const times = m.times ?? [];
  const q = times.length > 0 ? quantiles(times) : undefined;
  const row: MeasureRow = {
    method: method.name,
    label: method.label,
    ...(method.arithmetic !== undefined ? { arithmetic: method.arithmetic } : {}),
    beta: o.opts.beta,
    mode,
    peakBytes: m.error ? null : m.peakBytes ?? null,
    timeMs: m.error ? null : q?.median ?? null,
    timeSource: o.timeSource ?? defaultTimeSource(ctx),
    timeMsMin: m.error ? null : q?.min ?? null,
    timeMsMax: m.error ? null : q?.max ?? null,
    timeMsIqr: m.error ? null : q ? q.q3 - q.q1 : null,
    wallMsMedian: m.error || !m.walls?.length ? null : quantiles(m.walls).median,
    reps: m.times?.length ?? o.reps,
    warmup: m.warmups ?? o.warmup,
    peakByRole: m.error ? null : m.peakByRole ?? null,
    stats: m.error ? null : m.stats ?? null,
  };
  if (!m.error && m.passes && m.passes.size > 0 && ctx.hasTimestamps) {
    row.passMs = {};
    for (const [label, xs] of m.passes) row.passMs[label] = quantiles(xs).median;
  }
  if (!m.error && times.length > 0) {
    row.timeMsSamples = [...times];
    if (m.peaks && m.peaks.length > 0) row.peakBytesSamples = [...m.peaks];
  }
  if (m.error) row.error = m.error;
  else if (m.check) row.check = m.check;
  return row;
}

/** The estimate of one mode (the largest of all modes when the estimate is one number). */
export function estimateFor(e: MemoryEstimate | undefined, mode: Mode): number | undefined {
  if (e === undefined) return undefined;
  const x = typeof e === "number" ? e : e[mode];
  return typeof x === "number" && Number.isFinite(x) ? x : undefined;
}

/**
 * A method's memory estimate for a problem: the prepared method's (exact, from its plan) when it
 * gives one, else the method's own (before preparing); undefined when neither does or it throws
 * (then the cap at the free memory still holds).
 */
export function methodEstimate(
  method: LceMethod,
  spec: ProblemSpec,
  opts: LceOptions,
  prepared?: PreparedMethod,
): MemoryEstimate | undefined {
  try {
    return prepared?.estimateBytes?.() ?? method.estimateBytes?.(spec, opts) ?? undefined;
  } catch {
    return undefined;
  }
}

/** The row's error text for a thrown error (OOM with the bytes it needed when known). */
function _errorText(e: unknown, ctx: GpuContext, estimate: number | undefined): string {
  if (e instanceof _LeakError) return e.message;
  if (e instanceof GpuError) {
    if (e.kind === "out-of-memory") {
      const needed = (e as GpuError & { neededBytes?: number }).neededBytes ?? estimate;
      return needed !== undefined && needed > 0
        ? `OOM: needs ${formatMiB(needed)}`
        : `OOM: ${e.message}`;
    }
    if (e.kind === "limits") return `unsupported: ${e.message}`;
    if (e.kind === "device-lost") return `device lost: ${ctx.lostReason ?? e.message}`;
    return e.message.split("\n")[0];
  }
  if (e instanceof InputError) return `unsupported: ${e.message.split("\n")[0]}`;
  return oneLine(e);
}

/**
 * Resets the peak, then runs `fn` in the context's error scopes; an out-of-memory error gets the
 * bytes above `base` that the call had asked for when it failed.
 */
async function _scoped<T>(ctx: GpuContext, base: number, fn: () => Promise<T>): Promise<T> {
  ctx.resetPeak();
  try {
    return await ctx.scoped(fn);
  } catch (e) {
    if (e instanceof GpuError && e.kind === "out-of-memory") {
      // Allocation errors surface only when the scope is popped, after every allocation of the
      // call was tracked: the peak above `base` is what the call asked for.
      (e as GpuError & { neededBytes?: number }).neededBytes = ctx.memory().peakBytes - base;
    }
    throw e;
  }
}

function _buffersOf(tensors: readonly DeviceTensor[]): Set<TrackedBuffer> {
  const s = new Set<TrackedBuffer>();
  for (const t of tensors) for (const sh of t.shards) s.add(sh.buffer);
  return s;
}

function _destroyForward(prepared: PreparedMethod, f: ForwardOutput | undefined): void {
  if (!f) return;
  prepared.dispose(f.saved);
  f.loss.destroy();
}

function _checkLeak(ctx: GpuContext, before: number, beforeByRole: RoleBytes, when: string): void {
  const m = ctx.memory();
  if (m.liveBytes === before) return;
  const parts = (Object.keys(m.liveByRole) as BufferRole[])
    .filter((r) => m.liveByRole[r] !== beforeByRole[r])
    .map((r) => `${r} ${formatMiB(m.liveByRole[r] - beforeByRole[r])}`);
  const what = m.liveBytes > before ? "still live" : "freed too many";
  throw new _LeakError(
    `leak: ${formatMiB(Math.abs(m.liveBytes - before))} ${what} after ${when} ` +
      `(${parts.join(", ")}; ${m.liveBytes - before} bytes)`,
  );
}

function _peakAbove(ctx: GpuContext, base: number, baseByRole: RoleBytes) {
  const m = ctx.memory();
  const byRole = {} as RoleBytes;
  for (const r of Object.keys(m.peakByRole) as BufferRole[]) {
    byRole[r] = m.peakByRole[r] - baseByRole[r];
  }
  return { peak: m.peakBytes - base, byRole };
}

async function _measureMode(
  ctx: GpuContext,
  prepared: PreparedMethod,
  o: MeasureOptions,
  mode: Mode,
): Promise<_Measured> {
  const peaks: number[] = [];
  let peakBytes = -1;
  let peakByRole: RoleBytes | undefined;
  let stats: MethodStats | null = null;
  let check: CellCheck | undefined;
  // bwd: one forward serves every repetition (backward does not consume the saved state), unless
  // the backward hands over tensors of the saved state as its gradients; then a fresh one each.
  let fwd: ForwardOutput | undefined;
  const start = ctx.memory();
  let r: Repetitions;
  try {
    r = await timeRepetitions({
      warmup: o.warmup,
      warmupMs: o.warmupMs,
      reps: o.reps,
      source: o.timeSource ?? defaultTimeSource(ctx),
      // the whole repetition's time, with what it needs besides the call (a fresh forward)
      adapt: o.targetMs === undefined ? undefined : (ms) =>
        Math.min(
          Math.max(o.reps, Math.ceil(o.targetMs! / Math.max(ms, 1e-3))),
          Math.max(o.reps, o.maxReps ?? 20),
        ),
    }, async (rep, measured, last) => {
      const repStart = ctx.memory();
      if (mode === "bwd" && !fwd) {
        fwd = await _scoped(ctx, repStart.liveBytes, async () => {
          const rec = new Recorder(ctx);
          const f = await prepared.forward(rec, o.inputs);
          await rec.finish();
          return f;
        });
      }
      const before = ctx.memory();
      let handedOver = 0;
      const timing = await _scoped(ctx, before.liveBytes, () =>
        timeMode(ctx, {
          mode,
          prepared,
          inputs: o.inputs,
          gradOut: o.gradOut,
          fwd,
          async afterFinish({ f, g }) {
            if (rep === 0 && o.check) {
              const s = g ? (await prepared.stats?.()) ?? null : null;
              check = await o.check.check(ctx, o.opts, { loss: f?.loss, dE: g?.dE, dC: g?.dC }, s);
            }
            if (mode === "bwd") {
              const savedBufs = _buffersOf([...fwd!.saved.tensors, fwd!.loss]);
              for (const b of _buffersOf([g!.dE, g!.dC])) {
                if (savedBufs.has(b)) handedOver += b.size;
              }
            }
            if (measured) {
              const p = _peakAbove(ctx, before.liveBytes, before.liveByRole);
              const peak = p.peak + handedOver;
              peaks.push(peak);
              if (peak > peakBytes) {
                peakBytes = peak;
                peakByRole = p.byRole;
                peakByRole.output += handedOver;
              }
            }
            if (mode !== "fwd" && measured && last) stats = (await prepared.stats?.()) ?? null;
          },
        }));
      if (handedOver > 0) {
        _destroyForward(prepared, fwd);
        fwd = undefined;
      }
      const when = `repetition ${rep + 1}`;
      if (mode === "bwd" && fwd) _checkLeak(ctx, before.liveBytes, before.liveByRole, when);
      else _checkLeak(ctx, repStart.liveBytes, repStart.liveByRole, when);
      return timing;
    });
  } finally {
    if (fwd) _destroyForward(prepared, fwd);
  }
  if (mode === "bwd") {
    _checkLeak(ctx, start.liveBytes, start.liveByRole, "the forward's saved state was disposed");
  }
  return {
    peakBytes,
    peakByRole,
    times: r.times,
    walls: r.walls,
    peaks,
    stats,
    passes: r.passes,
    warmups: r.warmups,
    check,
  };
}
