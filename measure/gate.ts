/**
 * The regression gate of CI: a fixed small suite measured on every method of the registry and
 * compared with a committed baseline of the same adapter. It fails on any growth of memory, on
 * parity drift, and on significant slowdowns of time ratios.
 *
 * For every case (fixture × shape × dtype), method and β, a gate run measures:
 * - **memory**: `peakBytes` of {@link measureMethod} in each mode. Allocation is deterministic, so
 *   any growth over the baseline fails; a shrink is reported as an improvement.
 * - **parity**: loss, dE and dC of {@link runMethod} against the float64 oracle, each as
 *   max |got − want| / max |want| over the array. Each must stay below
 *   {@link GATE_THRESHOLDS}.parityMaxErr (5e-2) and below parityGrowth × the baseline's error +
 *   parityFloor (1.5× + 1e-5).
 * - **time**: absolute times drift with the load of a shared machine, so each mode's time is
 *   divided by a yardstick measured interleaved with it, the plain logits product E·Cᵀ
 *   (kernels/matmul.ts) of the same size: Y₀ M₁ Y₁ M₂ Y₂ … M_R Y_R, where M_i is one sample of
 *   every mode and Y_i the median of {@link YARDSTICK_CALLS} yardstick calls, and round i's ratio
 *   is t(M_i) / mean(Y_{i−1}, Y_i). A mode faster than the yardstick is sampled as the median of
 *   up to {@link MAX_CALLS_PER_SAMPLE} calls. With q_i = ratio_i / the baseline's median ratio, a
 *   mode regresses when (1) the median q exceeds `timeThreshold` (1.5), (2) the rounds are
 *   significantly slower than the baseline: a one-sided sign test of q_i > `timeSignBar` (1) at
 *   level `timeAlpha` (0.05; with 7 rounds: all 7), (3) the median ratio grew by at least
 *   `timeMinDelta` (0.1 yardsticks; smaller changes of the ~2 ms modes are noise), and (4) the
 *   same holds when the method is measured again ({@link runGate}).
 *
 * Times come from {@link gateTimeSource}: on a software adapter (Mesa lavapipe in CI) the process's
 * CPU time, not the adapter's timestamps. There the GPU is the CPU and the timestamps are
 * wall-clock: with other processes on the two cores, per-round ratios from timestamps had a
 * median spread (sd of log) of 0.46, from CPU time 0.12. On hardware, GPU timestamps.
 *
 * Absolute times are recorded and shown next to a baseline of the same host, never gated. Time
 * ratios are gated only against a baseline of the same host — adapter, time source, WebGPU
 * engine, driver and, on a software adapter, CPU model (gate_suites.ts timeHostKey): the ratio of
 * a kernel to a matrix product depends on all of them as much as on the code. Against another
 * host's baseline memory and parity are gated and the gate's last line says that time was not
 * compared, and why; `--update` keeps one baseline per host (gate_baseline.ts).
 *
 * Files: the suites, thresholds and run format in measure/gate_suites.ts, the statistics in
 * gate_stats.ts, the comparison in gate_compare.ts, its text in gate_format.ts, the baseline
 * files in gate_baseline.ts; memory comes from
 * {@link measureMethod} and every time from measure/timing.ts, the project's one timing path.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { createTensor, type DeviceTensor } from "../gpu/tensor.ts";
import { oneLine } from "../core/errors.ts";
import { type HostInputs, type LceOptions, resolveOptions } from "../core/options.ts";
import { makeFixture } from "../fixtures/mod.ts";
import { prepareMatmul } from "../kernels/matmul.ts";
import { defaultTile } from "../methods/_common.ts";
import { runMethod, uploadGradOut, uploadInputs } from "../methods/run.ts";
import type { LceMethod, MethodInputs, PreparedMethod } from "../methods/types.ts";
import { lceReference, type LceReferenceResult } from "../reference/lce_reference.ts";
import { compareArrays } from "../reference/compare.ts";
import { measureMethod } from "./measure.ts";
import {
  type CallTiming,
  median,
  type Mode,
  timeMode,
  timeOf,
  timeRecorder,
  timeRepetitions,
  type TimeSource,
} from "./timing.ts";
import {
  GATE_SEED,
  GATE_THRESHOLDS,
  type GateAdapter,
  type GateCase,
  type GateResult,
  type GateRun,
  type GateSuite,
  type GateThresholds,
  resultKey,
} from "./gate_suites.ts";
import { compareRuns, type GateComparison } from "./gate_compare.ts";
import { adapterSlug, driverVersion, hostCpuModel } from "./host.ts";
import { fmtErr, fmtRatio } from "./gate_stats.ts";

/** Upstream gradient of the parity runs. */
const _GRAD_OUTPUT = 1;

/**
 * Where the gate's times come from on a context (see {@link GateAdapter.timeSource}): `cpu` on a
 * software adapter (the process's CPU time: there the GPU is the CPU, and CPU time hardly moves
 * when other processes compete for the cores, while the adapter's timestamps are wall-clock),
 * `gpu` (timestamp queries) on hardware, `wall` on hardware without timestamp-query.
 */
export function gateTimeSource(ctx: GpuContext): TimeSource {
  return ctx.report.isFallbackAdapter ? "cpu" : ctx.hasTimestamps ? "gpu" : "wall";
}

/**
 * The adapter and host of a gate run on `ctx` ({@link GateAdapter}): the adapter's slug and
 * description, where times come from, the WebGPU engine, the driver and, on a software adapter,
 * the host's CPU model.
 */
export async function gateAdapter(ctx: GpuContext): Promise<GateAdapter> {
  const a: GateAdapter = {
    slug: adapterSlug(ctx.report),
    description: ctx.report.description,
    isFallbackAdapter: ctx.report.isFallbackAdapter,
    timeSource: gateTimeSource(ctx),
    engine: ctx.report.engine,
    engineVersion: ctx.report.engineVersion,
  };
  const driver = await driverVersion(ctx);
  if (driver !== undefined) a.driver = driver;
  const host = ctx.report.isFallbackAdapter ? await hostCpuModel() : undefined;
  if (host !== undefined) a.host = host;
  return a;
}

/** Options of {@link measureCase}. */
export interface MeasureCaseOptions {
  methods: readonly LceMethod[];
  betas: readonly number[];
  modes: readonly Mode[];
  rounds: number;
  /** Progress (one line per method and β). */
  onResult?: (r: GateResult, ms: number) => void;
  /** Method × β pairs already measured (a resumed run): not measured again. */
  skip?: (method: string, beta: number) => boolean;
}

/** Calls per yardstick sample (their median). */
export const YARDSTICK_CALLS = 3;
/**
 * Calls per sample of a mode faster than the yardstick: ⌈yardstick / mode⌉ (their median), at
 * most this many, so that a short call is not at the mercy of one hiccup.
 */
export const MAX_CALLS_PER_SAMPLE = 5;

/** Numbers to 4 significant digits (smaller baseline files, no false precision). */
const _round4 = (x: number) => Number(x.toPrecision(4));

/** The inputs of a case on the GPU, its yardstick, and the time source. */
interface _CaseData {
  c: GateCase;
  x: HostInputs;
  inputs: MethodInputs;
  source: TimeSource;
  /** One timed yardstick call. */
  yardstick: () => Promise<CallTiming>;
}

/**
 * Measures every method at every β on one case: parity (once), memory and failures
 * ({@link measureMethod}, one repetition of every mode, which also compiles and warms up), then
 * `rounds` timed rounds interleaved with the yardstick after a warm-up round.
 */
export async function measureCase(
  ctx: GpuContext,
  c: GateCase,
  o: MeasureCaseOptions,
): Promise<GateResult[]> {
  const x = makeFixture(c.fixture, { n: c.n, v: c.v, d: c.d, dtype: c.dtype, seed: GATE_SEED });
  const tile = defaultTile(ctx);
  const mm = await prepareMatmul(ctx, {
    tile,
    aDtype: c.dtype,
    bDtype: c.dtype,
    aTrans: false,
    bTrans: false,
  });
  const source = gateTimeSource(ctx);
  const inputs = uploadInputs(ctx, x, c.dtype);
  const yardOut = createTensor(ctx, {
    dtype: "f32",
    rows: c.n,
    cols: c.v,
    role: "workspace",
    label: "yardstick logits",
  });
  const data: _CaseData = {
    c,
    x,
    inputs,
    source,
    // in the context's error scopes: a yardstick the engine refuses fails the results it times
    yardstick: () =>
      ctx.scoped(() =>
        timeRecorder(ctx, (rec) =>
          mm.record(rec, {
            a: { tensor: inputs.e, trans: false },
            b: { tensor: inputs.c, trans: false },
            out: yardOut,
            tile,
            label: "yardstick E·Cᵀ",
          }))
      ),
  };
  const results: GateResult[] = [];
  try {
    await data.yardstick(); // warm-up (and a yardstick the engine refuses fails here, once)
    for (const beta of o.betas) {
      const opts = resolveOptions({ beta });
      const want = lceReference(x, opts, _GRAD_OUTPUT);
      const gradOut = uploadGradOut(ctx, c.n, opts, _GRAD_OUTPUT);
      try {
        for (const method of o.methods) {
          if (o.skip?.(method.name, beta)) continue;
          const t0 = performance.now();
          const r = await _measureMethod(ctx, method, data, { opts, want, gradOut }, o);
          results.push(r);
          o.onResult?.(r, performance.now() - t0);
        }
      } finally {
        gradOut.destroy();
      }
    }
  } finally {
    yardOut.destroy();
    for (const t of [inputs.e, inputs.c, inputs.targets]) t.destroy();
  }
  return results;
}

async function _measureMethod(
  ctx: GpuContext,
  method: LceMethod,
  data: _CaseData,
  b: { opts: LceOptions; want: LceReferenceResult; gradOut: DeviceTensor },
  o: MeasureCaseOptions,
): Promise<GateResult> {
  const { c } = data;
  const result: GateResult = {
    fixture: c.fixture,
    n: c.n,
    v: c.v,
    d: c.d,
    dtype: c.dtype,
    method: method.name,
    beta: b.opts.beta,
    parity: null,
    yardstickMs: null,
    modes: {},
  };
  const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
  let why: string | undefined;
  try {
    why = method.unsupported?.(ctx, spec, b.opts);
  } catch (e) {
    why = oneLine(e);
  }
  if (why !== undefined) {
    result.error = `unsupported: ${why}`;
    return result;
  }
  try {
    const got = await runMethod(ctx, method, data.x, b.opts, {
      dtype: c.dtype,
      gradOutput: _GRAD_OUTPUT,
    });
    result.parity = {
      loss: _parityError(got.loss, b.want.loss),
      dE: _parityError(got.dE, b.want.dE),
      dC: _parityError(got.dC, b.want.dC),
    };
  } catch (e) {
    result.error = oneLine(e);
    return result;
  }
  const rows = await measureMethod(ctx, method, {
    spec,
    opts: b.opts,
    inputs: data.inputs,
    gradOut: b.gradOut,
    modes: o.modes,
    warmup: 0,
    reps: 1,
  });
  const timed = rows.filter((r) => r.error === undefined).map((r) => r.mode);
  let t: { times: Map<Mode, number[]>; yards: number[] };
  try {
    t = await _timeRounds(ctx, method, data, b, o, timed);
  } catch (e) {
    result.error = `timing failed: ${oneLine(e)}`;
    return result;
  }
  const { times, yards } = t;
  if (timed.length > 0) result.yardstickMs = _round4(median(yards));
  for (const row of rows) {
    if (row.error !== undefined) {
      result.modes[row.mode] = {
        peakBytes: null,
        timeRatio: null,
        ratios: [],
        timeMs: null,
        error: row.error,
      };
      continue;
    }
    const ts = times.get(row.mode)!;
    const ratios = ts.map((t, i) => _round4(t / ((yards[i] + yards[i + 1]) / 2)));
    result.modes[row.mode] = {
      peakBytes: row.peakBytes,
      timeRatio: _round4(median(ratios)),
      ratios,
      timeMs: _round4(median(ts)),
    };
  }
  return result;
}

/**
 * The timed rounds of the modes that ran: a warm-up call of each mode and a yardstick sample,
 * then `o.rounds` rounds of one sample of every mode followed by a yardstick sample. A mode
 * faster than the yardstick is sampled as the median of several calls.
 */
async function _timeRounds(
  ctx: GpuContext,
  method: LceMethod,
  data: _CaseData,
  b: { opts: LceOptions; gradOut: DeviceTensor },
  o: MeasureCaseOptions,
  timed: readonly Mode[],
): Promise<{ times: Map<Mode, number[]>; yards: number[] }> {
  const times = new Map<Mode, number[]>(timed.map((m) => [m, []]));
  const yards: number[] = [];
  if (timed.length === 0) return { times, yards };
  const { c, source } = data;
  const spec = { n: c.n, v: c.v, d: c.d, dtype: c.dtype };
  let prepared: PreparedMethod | undefined;
  try {
    prepared = await ctx.scoped(() => method.prepare(ctx, spec, b.opts));
    const p = prepared;
    const call = (mode: Mode) =>
      ctx.scoped(() =>
        timeMode(ctx, { mode, prepared: p, inputs: data.inputs, gradOut: b.gradOut })
      );
    // one yardstick sample: the median of YARDSTICK_CALLS calls (one slow call is one outlier)
    const yard = async () =>
      (await timeRepetitions({ warmup: 0, reps: YARDSTICK_CALLS, source }, data.yardstick))
        .median;
    // warm-up; a mode faster than the yardstick is sampled as the median of several calls
    const reps = new Map<Mode, number>();
    for (const mode of timed) reps.set(mode, timeOf(await call(mode), source));
    yards.push(await yard());
    for (const [mode, t] of reps) {
      reps.set(mode, Math.min(MAX_CALLS_PER_SAMPLE, Math.max(1, Math.ceil(yards[0] / t))));
    }
    for (let i = 0; i < o.rounds; i++) {
      for (const mode of timed) {
        const r = await timeRepetitions(
          { warmup: 0, reps: reps.get(mode)!, source },
          () => call(mode),
        );
        times.get(mode)!.push(r.median);
      }
      yards.push(await yard());
    }
  } finally {
    prepared?.release?.();
  }
  return { times, yards };
}

/** max |got − want| / max |want| (over 1 when want is all zero); Infinity for NaN or lengths. */
function _parityError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) return Infinity;
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]));
  const r = compareArrays(got, want, { atol: 0, rtol: 0 });
  const e = r.maxAbsErr / (scale || 1);
  return Number.isNaN(e) ? Infinity : Number(e.toPrecision(3));
}

/** Options of {@link runGate}. */
export interface RunGateOptions {
  suite: GateSuite;
  /** Methods to measure (default: the registry's, in order). */
  methods: readonly LceMethod[];
  /** Timed rounds (default: the suite's). */
  rounds?: number;
  /** The adapter description and environment to record. */
  adapter: GateAdapter;
  env: GateRun["env"];
  /** The baseline to compare with; none for a plain measurement (--update). */
  baseline?: GateRun;
  /** Only some methods of the registry are measured. */
  partial?: boolean;
  thresholds?: GateThresholds;
  /** Progress lines. */
  onProgress?: (line: string) => void;
  /** Called after every measured result with the results so far (e.g. to save a partial run). */
  onResult?: (results: readonly GateResult[]) => void;
  /** Results of an interrupted run (the same suite): kept, and not measured again. */
  done?: readonly GateResult[];
}

/** A gate run, its comparison with the baseline, and what was measured again. */
export interface GateOutcome {
  run: GateRun;
  comparison?: GateComparison;
  /** Results and modes measured again because their time regressed on the first pass. */
  rerun: { key: string; mode: Mode }[];
}

/**
 * Measures the suite; with a baseline, compares, then measures every method whose time regressed
 * once more and compares again with the fresh rounds in place of the flagged modes' first ones: a
 * slowdown fails only when both measurements show it.
 */
export async function runGate(ctx: GpuContext, o: RunGateOptions): Promise<GateOutcome> {
  const rounds = o.rounds ?? o.suite.rounds;
  const results: GateResult[] = [...(o.done ?? [])];
  const doneKeys = new Set(results.map(resultKey));
  const total = o.suite.cases.length * o.suite.betas.length * o.methods.length;
  const progress = (prefix: string) => (r: GateResult, ms: number) => {
    const modes = Object.entries(r.modes).map(([m, x]) =>
      x.error !== undefined
        ? `${m} failed`
        : `${m} ${x.peakBytes} B, ${fmtRatio(x.timeRatio)} yardsticks`
    );
    const what = r.error ??
      `parity ${fmtErr(Math.max(r.parity!.loss, r.parity!.dE, r.parity!.dC))}; ${modes.join(", ")}`;
    o.onProgress?.(`${prefix}${resultKey(r)}: ${what} (${(ms / 1000).toFixed(1)} s)`);
  };
  for (const c of o.suite.cases) {
    const skip = (method: string, beta: number) => doneKeys.has(resultKey({ ...c, method, beta }));
    if (o.methods.every((m) => o.suite.betas.every((b) => skip(m.name, b)))) continue;
    await measureCase(ctx, c, {
      methods: o.methods,
      betas: o.suite.betas,
      modes: o.suite.modes,
      rounds,
      skip,
      onResult: (r, ms) => {
        results.push(r);
        o.onResult?.(results); // saved before it is announced
        progress(`[${results.length}/${total}] `)(r, ms);
      },
    });
  }
  // the suite's order, whatever was resumed
  const rank = new Map<string, number>();
  for (const c of o.suite.cases) {
    for (const beta of o.suite.betas) {
      for (const m of o.methods) rank.set(resultKey({ ...c, method: m.name, beta }), rank.size);
    }
  }
  results.sort((a, b) =>
    (rank.get(resultKey(a)) ?? Infinity) - (rank.get(resultKey(b)) ?? Infinity)
  );
  const run: GateRun = {
    version: 1,
    suite: o.suite.name,
    adapter: o.adapter,
    env: o.env,
    rounds,
    thresholds: o.thresholds ?? GATE_THRESHOLDS,
    results,
  };
  if (!o.baseline) return { run, rerun: [] };
  const cmp = (r: GateRun) =>
    compareRuns(r, o.baseline!, {
      thresholds: o.thresholds,
      partial: o.partial,
      optional: o.suite.optionalMethods,
    });
  let comparison = cmp(run);
  const rerun = comparison.timeRegressed;
  for (const key of new Set(rerun.map((x) => x.key))) {
    const i = run.results.findIndex((r) => resultKey(r) === key);
    const r = run.results[i];
    const method = o.methods.find((m) => m.name === r.method)!;
    const modes = rerun.filter((x) => x.key === key).map((x) => x.mode);
    o.onProgress?.(`time regressed: measuring ${key} (${modes.join(", ")}) again`);
    const [again] = await measureCase(ctx, r, {
      methods: [method],
      betas: [r.beta],
      modes: o.suite.modes,
      rounds,
      onResult: progress("re-run: "),
    });
    const merged: GateResult = { ...r, modes: { ...r.modes } };
    for (const mode of modes) {
      const a = again.modes[mode];
      if (a && a.error === undefined) {
        merged.modes[mode] = {
          ...merged.modes[mode]!,
          ratios: a.ratios,
          timeRatio: a.timeRatio,
          timeMs: a.timeMs,
        };
      }
    }
    run.results[i] = merged;
  }
  if (rerun.length) comparison = cmp(run);
  return { run, comparison, rerun };
}
