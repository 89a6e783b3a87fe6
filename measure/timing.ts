/**
 * The one way this project times GPU work: record into a {@link Recorder}, finish it, read its
 * time (GPU timestamps, wall clock, or the process's CPU time), repeat after warm-up and take the
 * median. measure/measure.ts (Table 3, sweeps), measure/gate.ts, bench/gpu_time.ts and
 * scripts/tune_forward.ts all time through {@link timeRecorder} / {@link timeMode} and summarise
 * with {@link timeRepetitions} / {@link median}.
 * @module
 */
import process from "node:process";
import { parseList } from "../core/cli.ts";
import { check } from "../core/errors.ts";
import type { GpuContext } from "../gpu/context.ts";
import { Recorder, type Timing } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import type { ForwardOutput, Gradients, MethodInputs, PreparedMethod } from "../methods/types.ts";

/** What is measured: the forward, the backward given a saved forward, or both in one recorder. */
export type Mode = "fwd" | "bwd" | "fwd+bwd";
/** All modes, in the table's column order. */
export const MODES: readonly Mode[] = ["fwd", "bwd", "fwd+bwd"];

/** The modes of a `--modes fwd,bwd` list (InputError naming an unknown one), or all three. */
export function parseModes(list: string | undefined): Mode[] {
  if (list === undefined) return [...MODES];
  return parseList("--modes", list).map((m) => {
    check(
      (MODES as readonly string[]).includes(m),
      `unknown mode '${m}' (expected fwd, bwd or fwd+bwd)`,
    );
    return m as Mode;
  });
}

/**
 * Where a time comes from: `gpu` (timestamp queries), `wall` (recorder creation to completion),
 * or `cpu` (the process's CPU time over the same span; the gate's source on a software adapter).
 */
export type TimeSource = "gpu" | "wall" | "cpu";

/** One timed recorder: its {@link Timing} plus the process's CPU time over it, ms. */
export interface CallTiming extends Timing {
  cpuMs: number;
}

/**
 * The one meaning of a speed ratio in every report (table3, bench, gate): how many times faster
 * than the baseline, the baseline's time over this time, so that > 1 is faster and < 1 slower.
 * Null when either time is missing or this time is not positive.
 */
export function timesFaster(baselineMs: number | null, ms: number | null): number | null {
  return baselineMs !== null && ms !== null && ms > 0 && Number.isFinite(baselineMs)
    ? baselineMs / ms
    : null;
}

/** The legend line of a speed ratio ({@link timesFaster}), for every report that shows one. */
export const SPEED_RATIO_LEGEND =
  "× faster than the baseline = the baseline's time / this time: > 1 is faster, < 1 slower";

/** The time of `t` in `source`'s unit (ms). */
export function timeOf(t: CallTiming, source: TimeSource): number {
  return source === "cpu" ? t.cpuMs : source === "gpu" ? t.gpuMs : t.wallMs;
}

/** The time source of Table 3 rows on a context: GPU timestamps when there are, else wall. */
export function defaultTimeSource(ctx: GpuContext): TimeSource {
  return ctx.hasTimestamps ? "gpu" : "wall";
}

/** Milliseconds of CPU time (user + system) this process has used, every thread included. */
function _cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/**
 * Runs `record` (which records into the Recorder it is given), finishes the recorder and returns
 * its timing, with the CPU time from before the recording to the completion of the work.
 */
export async function timeRecorder(
  ctx: GpuContext,
  record: (rec: Recorder) => Promise<void> | void,
): Promise<CallTiming> {
  const c0 = _cpuMs();
  const rec = new Recorder(ctx);
  await record(rec);
  const t = await rec.finish();
  return { ...t, cpuMs: _cpuMs() - c0 };
}

/** One call of a mode for {@link timeMode}. */
export interface ModeCall {
  mode: Mode;
  prepared: PreparedMethod;
  inputs: MethodInputs;
  /** Upstream gradient (1×1, or n×1 for reduction none). */
  gradOut: DeviceTensor;
  /**
   * bwd: the forward whose saved state the backward reads, owned by the caller. Without it, a
   * forward is recorded and finished first, untimed, and freed after the call.
   */
  fwd?: ForwardOutput;
  /** Called once the work has finished, before anything it produced is freed. */
  afterFinish?: (out: { f?: ForwardOutput; g?: Gradients }) => void | Promise<void>;
}

/**
 * One timed call of a mode (fwd: the forward; bwd: the backward of a forward recorded before,
 * untimed; fwd+bwd: both in one Recorder). Everything the call returned is freed after it (the
 * gradients, and the forward unless the caller passed it).
 */
export async function timeMode(ctx: GpuContext, c: ModeCall): Promise<CallTiming> {
  const p = c.prepared;
  let own: ForwardOutput | undefined;
  let f: ForwardOutput | undefined;
  let g: Gradients | undefined;
  try {
    if (c.mode === "bwd") {
      if (c.fwd) f = c.fwd;
      else {
        const rec = new Recorder(ctx);
        own = f = await p.forward(rec, c.inputs);
        await rec.finish();
      }
    }
    const t = await timeRecorder(ctx, async (rec) => {
      if (c.mode !== "bwd") own = f = await p.forward(rec, c.inputs);
      if (c.mode !== "fwd") g = await p.backward(rec, c.inputs, f!.saved, c.gradOut);
    });
    await c.afterFinish?.({ f, g });
    return t;
  } finally {
    g?.dE.destroy(); // idempotent: gradients handed over from the saved state are safe
    g?.dC.destroy();
    if (own) {
      p.dispose(own.saved);
      own.loss.destroy();
    }
  }
}

/** Options of {@link timeRepetitions}. */
export interface RepetitionOptions {
  /** Unmeasured calls first (≥ 0). */
  warmup: number;
  /**
   * Keep making unmeasured calls until this much wall time (ms) has passed since the first, even
   * past `warmup` (an idle GPU raises its clocks only after some work: a short product measured
   * first ran 5× slower), unless one call lasts a tenth of it or more (such calls keep the clocks
   * up by themselves). Default: none.
   */
  warmupMs?: number;
  /** Measured calls (≥ 1). */
  reps: number;
  /** Which time the samples are (default `gpu`). */
  source?: TimeSource;
  /**
   * After the first measured call (the warm-ups have paid the first-use costs: a bwd cell's fresh
   * forward, the allocator's first buffers), the number of measured calls given that call's whole
   * wall time in ms (what `call` spent, not only the recorder); default: `reps`.
   */
  adapt?: (firstMeasuredMs: number) => number;
}

/** The measured calls of {@link timeRepetitions}. */
export interface Repetitions {
  /** Each measured call's time in the source's unit, in run order. */
  times: number[];
  /** Each measured call's wall time, ms. */
  walls: number[];
  /** GPU ms of each pass label per measured call (passes sharing a label in one call summed). */
  passes: Map<string, number[]>;
  /** The median of {@link Repetitions.times}. */
  median: number;
  /** Unmeasured calls made first (`warmup`, or more with `warmupMs`). */
  warmups: number;
}

/**
 * Runs `call` `warmup` times unmeasured and then `reps` times (or as `adapt` says) measured, and
 * returns the samples and their median. `call(rep, measured, last)` performs one timed call (e.g.
 * {@link timeRecorder} or {@link timeMode}) and returns its timing; `last` says whether it is the
 * last call as far as known when it starts.
 */
export async function timeRepetitions(
  o: RepetitionOptions,
  call: (rep: number, measured: boolean, last: boolean) => Promise<CallTiming>,
): Promise<Repetitions> {
  const source = o.source ?? "gpu";
  const times: number[] = [], walls: number[] = [];
  const passes = new Map<string, number[]>();
  let warmups = 0, longCall = false;
  const w0 = performance.now(), floor = o.warmupMs ?? 0;
  while (warmups < o.warmup || (!longCall && performance.now() - w0 < floor)) {
    const t0 = performance.now();
    await call(warmups, false, false);
    longCall ||= performance.now() - t0 >= floor / 10;
    warmups++;
  }
  let total = warmups + o.reps;
  for (let rep = warmups; rep < total; rep++) {
    const t0 = performance.now();
    const t = await call(rep, true, rep === total - 1);
    if (o.adapt && rep === warmups) total = warmups + o.adapt(performance.now() - t0);
    times.push(timeOf(t, source));
    walls.push(t.wallMs);
    const sums = new Map<string, number>();
    for (const p of t.passes) sums.set(p.label, (sums.get(p.label) ?? 0) + p.gpuMs);
    for (const [label, ms] of sums) {
      if (!passes.has(label)) passes.set(label, []);
      passes.get(label)!.push(ms);
    }
  }
  return { times, walls, passes, median: median(times), warmups };
}

/** The median of each pass label's samples. */
export function passMedians(
  passes: ReadonlyMap<string, readonly number[]>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [label, xs] of passes) out[label] = median(xs);
  return out;
}

/** Median, quartiles (linear interpolation), min and max of a non-empty list. */
export function quantiles(xs: readonly number[]): {
  min: number;
  q1: number;
  median: number;
  q3: number;
  max: number;
} {
  if (xs.length === 0) throw new RangeError("quantiles of an empty list");
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number) => _at(s, p);
  return { min: s[0], q1: at(0.25), median: at(0.5), q3: at(0.75), max: s[s.length - 1] };
}

/** The median of a non-empty list. */
export function median(xs: readonly number[]): number {
  return quantiles(xs).median;
}

/**
 * The p-quantile (0 ≤ p ≤ 1) of a non-empty list, interpolated linearly between order statistics
 * as {@link quantiles} does: `percentile(xs, 0.2)` is p20.
 */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) throw new RangeError("percentile of an empty list");
  if (!(p >= 0 && p <= 1)) throw new RangeError(`percentile needs 0 ≤ p ≤ 1, got ${p}`);
  return _at([...xs].sort((a, b) => a - b), p);
}

/** The p-quantile of a sorted list. */
function _at(s: readonly number[], p: number): number {
  const x = p * (s.length - 1);
  const lo = Math.floor(x), hi = Math.ceil(x);
  return s[lo] + (s[hi] - s[lo]) * (x - lo);
}
