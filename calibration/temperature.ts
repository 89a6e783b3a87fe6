/**
 * Temperature scaling without the logits: NLL, ECE and entropy of a linear LM head at any
 * temperature T from the fused forward, and the NLL-optimal T* (post-hoc temperature scaling,
 * Guo et al. 2017) found with one fused forward per step.
 *
 * Scaling. The logits at temperature T are z/T. Without softcap z = E·Cᵀ, so z/T = (E/T)·Cᵀ: the
 * fused forward on the hidden states E/T gives every statistic at T. With a softcap s the logits
 * are z = s·tanh(x/s) of x = E·Cᵀ, and temperature applies to the capped logits the model
 * outputs: z/T = (s/T)·tanh(x/s) = (s/T)·tanh((x/T)/(s/T)). So the fused forward runs on E/T with
 * the softcap s/T (scaling E alone would give s·tanh(x/(sT)), a different function, and is
 * wrong). The softcap is a constant of the compiled kernel, so with a softcap every new T
 * compiles one more pipeline; without one the kernel is compiled once.
 *
 * Memory. E, C and the targets are uploaded once; for each T the host writes E/T (computed in
 * float64 from the E it was given, rounded to the storage dtype) over the same E buffer, so the
 * GPU holds no second copy of E, and what the fused forward allocates above the inputs is its
 * O(n·S) workspace and the n×6 f32 outputs (calibration/streaming.ts): O(N), never N×|V|. In f32
 * the rounding of E/T moves each logit by about one ulp; in bf16/f16 E/T is rounded to the dtype
 * again (relative 2⁻⁹ / 2⁻¹² per element), so T ≠ 1 evaluates the head with slightly perturbed
 * hidden states, as a 16-bit deployment that scales its hidden states would.
 *
 * Fit. The mean NLL is convex in 1/T, so it has at most one minimum over T > 0, and its derivative
 * in log T is, per token, z_t/T − Σ p·z/T = H − NLL (entropy minus NLL; see
 * calibration/entropy_calibration.ts): both come out of the same fused forward (the β = 0 loss row
 * and the entropy statistic), so each step of the search costs exactly one forward. The search
 * works in log T: it steps from the start by factors of 4 in the downhill direction until the
 * derivative changes sign (a bracket), within [{@link T_MIN}, {@link T_MAX}], then runs Brent's
 * root finder (inverse quadratic interpolation safeguarded by bisection) on the derivative until
 * log T is known to rtol/2, i.e. T* to a relative tolerance rtol (default 1e-4). When the NLL still
 * falls at an end of the range (e.g. every kept token's argmax is its target: the NLL decreases
 * towards T → 0; or targets score below the mean logit: it decreases towards T → ∞) there is no
 * minimum to bracket, and the fit throws an InputError saying so.
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { upload } from "../gpu/tensor.ts";
import { check, InputError } from "../core/errors.ts";
import { checkInputs, type Dtype, type HostInputs, resolveOptions } from "../core/options.ts";
import type { GemmTile } from "../kernels/gemm_codegen.ts";
import type { MethodInputs } from "../methods/types.ts";
import { uploadInputs } from "../methods/run.ts";
import { calibrationMetrics, type CalibrationReport } from "./metrics.ts";
import { type EntropyCalibration, entropyCalibration } from "./entropy_calibration.ts";
import {
  type PreparedStreamingCalibration,
  prepareStreamingCalibration,
  type StreamingTokenStats,
} from "./streaming.ts";

/** Smallest temperature the fit searches. */
export const T_MIN = 1e-4;
/** Largest temperature the fit searches. */
export const T_MAX = 1e4;
/** Default relative tolerance of T*. */
export const FIT_RTOL = 1e-4;

/** Throws InputError unless T is a positive finite number. */
export function checkTemperature(t: number, what = "temperature"): void {
  check(
    typeof t === "number" && Number.isFinite(t) && t > 0,
    `${what} must be positive and finite, got ${t}`,
  );
}

/** The largest finite f32. */
const _F32_MAX = 3.4028234663852886e38;

/**
 * Throws InputError naming `what` when the logits of `x` divided by T could leave f32: by
 * Cauchy–Schwarz |z/T| ≤ max‖E_n‖·max‖C_v‖ / T, which must stay a thousandth of f32's range
 * below its largest value (the forward sums products of E/T and C in f32), and so must E/T.
 */
export function checkTemperatureFor(x: HostInputs, t: number, what = "temperature"): void {
  checkTemperature(t, what);
  const maxNorm = (a: Float32Array, rows: number, cols: number) => {
    let best = 0, maxAbs = 0;
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let j = r * cols; j < (r + 1) * cols; j++) {
        s += a[j] * a[j];
        maxAbs = Math.max(maxAbs, Math.abs(a[j]));
      }
      best = Math.max(best, Math.sqrt(s));
    }
    return { norm: best, maxAbs };
  };
  const e = maxNorm(x.e, x.n, x.d), c = maxNorm(x.c, x.v, x.d);
  const bound = (e.norm * c.norm) / t;
  const limit = _F32_MAX / 1000;
  check(
    bound <= limit && e.maxAbs / t <= limit,
    `${what} ${t} is too small for these inputs: the logits divided by it reach up to ` +
      `${bound.toPrecision(3)} (‖E_n‖·‖C_v‖ up to ${(e.norm * c.norm).toPrecision(3)}), past ` +
      `f32's range; give T ≥ ${((e.norm * c.norm) / limit).toPrecision(2)}`,
  );
}

/**
 * Inputs and softcap whose logits are those of `x` (with `softcap`) divided by T: E/T (float64
 * division rounded to f32; C and the targets shared) and s/T. For one-off passes of other
 * methods at T (e.g. the label-smoothed loss); {@link prepareTemperatureScan} reuses its buffers.
 */
export function scaledInputs(
  x: HostInputs,
  t: number,
  softcap?: number,
): { x: HostInputs; softcap?: number } {
  checkTemperature(t);
  if (t === 1) return { x, softcap };
  const e = new Float32Array(x.e.length);
  for (let i = 0; i < e.length; i++) e[i] = x.e[i] / t;
  return { x: { ...x, e }, softcap: softcap === undefined ? undefined : softcap / t };
}

/** Statistics of the kept tokens at one temperature. */
export interface TemperaturePoint {
  /** The temperature T (logits z/T). */
  temperature: number;
  /** Mean NLL (β = 0 loss) over the kept tokens, nats. */
  nll: number;
  /** ∂(mean NLL)/∂log T = mean entropy − mean NLL. */
  slope: number;
  /** ECE, RMSCE, accuracy, mean confidence, mean entropy, per-bin accuracy and confidence. */
  report: CalibrationReport;
  /** Entropy against NLL, overall and per confidence bin. */
  entropy: EntropyCalibration;
  /** The per-token statistics (loss = NLL). */
  tokens: StreamingTokenStats;
}

/** Options of {@link prepareTemperatureScan}. */
export interface TemperatureScanOptions {
  /** Storage dtype on the GPU (default f32). */
  dtype?: Dtype;
  /** Softcap s of the logits, z = s·tanh(x/s), applied before the temperature (default none). */
  softcap?: number;
  /** Ignore index (default −100). */
  ignoreIndex?: number;
  /** ECE bins M (default 15). */
  bins?: number;
  /** GEMM tile of the fused forward. */
  tile?: GemmTile;
  /** Vocab splits of the fused forward. */
  vocabSplits?: number;
}

/** A temperature scan over one set of inputs held on the GPU. */
export interface TemperatureScan {
  /** Statistics at temperature T (one fused forward). */
  at(t: number): Promise<TemperaturePoint>;
  /** The NLL-optimal temperature (see the module documentation). */
  fit(o?: TemperatureFitOptions): Promise<TemperatureFit<TemperaturePoint>>;
  /** Fused forwards run so far. */
  readonly forwards: number;
  /** The uploaded inputs (for memory accounting). */
  readonly inputs: MethodInputs;
  /** Frees the inputs on the GPU. */
  destroy(): void;
}

/**
 * Uploads the inputs and compiles the fused forward with token statistics (β = 0: the loss rows
 * are the NLL). Throws InputError on bad inputs or options.
 */
export async function prepareTemperatureScan(
  ctx: GpuContext,
  x: HostInputs,
  o: TemperatureScanOptions = {},
): Promise<TemperatureScan> {
  const opts = resolveOptions({
    beta: 0,
    softcap: o.softcap,
    ignoreIndex: o.ignoreIndex ?? -100,
    reduction: "none",
  });
  checkInputs(x, { ...opts, reduction: "mean" });
  const dtype = o.dtype ?? "f32";
  const spec = { n: x.n, v: x.v, d: x.d, dtype };
  const bins = o.bins ?? 15;
  const prepared = new Map<number, PreparedStreamingCalibration>();
  const forwardAt = async (cap: number | undefined) => {
    const key = cap ?? 0;
    let p = prepared.get(key);
    if (p === undefined) {
      p = await prepareStreamingCalibration(ctx, {
        spec,
        opts: resolveOptions({ ...opts, softcap: cap }),
        tile: o.tile,
        vocabSplits: o.vocabSplits,
      });
      prepared.set(key, p);
    }
    return p;
  };
  await forwardAt(opts.softcap);
  const inputs = uploadInputs(ctx, x, dtype);
  let current = 1; // the temperature E is scaled for on the GPU
  const scaled = new Float32Array(x.n * x.d);
  let forwards = 0;
  const scan: TemperatureScan = {
    get forwards() {
      return forwards;
    },
    inputs,
    async at(t) {
      checkTemperature(t);
      const cap = opts.softcap === undefined ? undefined : opts.softcap / t;
      const ff = await forwardAt(cap);
      if (t !== current) {
        for (let i = 0; i < scaled.length; i++) scaled[i] = x.e[i] / t;
        upload(ctx, inputs.e, scaled);
        current = t;
      }
      const tokens = await ff.measure(inputs, x.targets);
      forwards++;
      const report = calibrationMetrics(tokens, { bins });
      const entropy = entropyCalibration(
        { confidence: tokens.confidence, entropy: tokens.entropy, nll: tokens.loss },
        { bins },
      );
      return { temperature: t, nll: tokens.meanLoss, slope: entropy.gap, report, entropy, tokens };
    },
    fit(fo) {
      return fitTemperature((t) => scan.at(t), fo);
    },
    destroy() {
      for (const t of [inputs.e, inputs.c, inputs.targets]) t.destroy();
    },
  };
  return scan;
}

/** Options of {@link fitTemperature}. */
export interface TemperatureFitOptions {
  /** Where the search starts (default 1). */
  start?: number;
  /** Relative tolerance of T* (default {@link FIT_RTOL}). */
  rtol?: number;
  /** Search range (default [{@link T_MIN}, {@link T_MAX}]). */
  range?: readonly [number, number];
}

/** One evaluation of the search. */
export interface FitStep {
  temperature: number;
  nll: number;
  slope: number;
}

/** What {@link fitTemperature} returns. */
export interface TemperatureFit<P> {
  /** T*, within rtol of the minimiser of the mean NLL. */
  temperature: number;
  /** The evaluation at T*. */
  point: P;
  /** Evaluations (fused forwards) the search took, including the start. */
  evaluations: number;
  /** The bracket [lo, hi] of T* the root finder started from. */
  bracket: [number, number];
  /** Every evaluation in order. */
  trace: FitStep[];
}

/**
 * Minimises a mean NLL over T > 0 given, at each T, its value and its derivative in log T
 * (`slope`): brackets a sign change of the slope stepping by factors of 4 from `start`, then
 * Brent's root finder on the slope in log T to rtol/2. Throws InputError when the range holds no
 * sign change (no minimum), or on a non-finite slope.
 */
export async function fitTemperature<P extends FitStep>(
  evaluate: (t: number) => Promise<P>,
  o: TemperatureFitOptions = {},
): Promise<TemperatureFit<P>> {
  const start = o.start ?? 1;
  const rtol = o.rtol ?? FIT_RTOL;
  const [tMin, tMax] = o.range ?? [T_MIN, T_MAX];
  checkTemperature(start, "the fit's start temperature");
  check(Number.isFinite(rtol) && rtol > 0 && rtol < 1, `rtol must be in (0, 1), got ${rtol}`);
  checkTemperature(tMin, "the fit's lower limit");
  checkTemperature(tMax, "the fit's upper limit");
  check(tMin < tMax && start >= tMin && start <= tMax, `start ${start} outside [${tMin}, ${tMax}]`);
  const trace: FitStep[] = [];
  const ev = async (logT: number) => {
    const p = await evaluate(Math.exp(logT));
    trace.push({ temperature: p.temperature, nll: p.nll, slope: p.slope });
    if (!Number.isFinite(p.slope) || !Number.isFinite(p.nll)) {
      throw new InputError(
        `temperature fit: NLL ${p.nll}, slope ${p.slope} at T = ${p.temperature}`,
      );
    }
    return p;
  };
  const lo = Math.log(tMin), hi = Math.log(tMax);
  const x0 = Math.log(start);
  const p0 = await ev(x0);
  const done = (p: P, br: [number, number]) => ({
    temperature: p.temperature,
    point: p,
    evaluations: trace.length,
    bracket: br,
    trace,
  });
  if (p0.slope === 0) return done(p0, [p0.temperature, p0.temperature]);
  const { a, b } = await _bracket(ev, { x: x0, p: p0 }, [lo, hi]);
  const bracket: [number, number] = a.p.temperature < b.p.temperature
    ? [a.p.temperature, b.p.temperature]
    : [b.p.temperature, a.p.temperature];
  return done(await _zeroin(ev, a, b, 0.5 * rtol), bracket);
}

/** A point of the fit: log T and the evaluation there. */
interface _At<P> {
  x: number;
  p: P;
}

/**
 * Walks downhill from `a` by factors of 4 in T until the slope changes sign: the two last points
 * bracket the minimum. InputError when a limit of `[lo, hi]` (log T) is reached first.
 */
async function _bracket<P extends FitStep>(
  ev: (logT: number) => Promise<P>,
  a: _At<P>,
  [lo, hi]: [number, number],
): Promise<{ a: _At<P>; b: _At<P> }> {
  const dir = a.p.slope < 0 ? 1 : -1; // slope < 0: the NLL falls as T grows
  const sign0 = Math.sign(a.p.slope);
  for (;;) {
    const end = dir > 0 ? hi : lo;
    if (a.x === end) {
      const fmt = (t: number) => t.toExponential(0);
      throw new InputError(
        `temperature fit: cannot bracket a minimum of the mean NLL in T ∈ [${fmt(Math.exp(lo))}, ${
          fmt(Math.exp(hi))
        }]: it ${
          a.p.slope === 0 ? "is flat" : dir > 0 ? "still decreases" : "still increases"
        } at T = ${fmt(Math.exp(end))} (dNLL/dlog T = ${a.p.slope.toExponential(3)})`,
      );
    }
    const x = dir > 0 ? Math.min(hi, a.x + Math.log(4)) : Math.max(lo, a.x - Math.log(4));
    const b = { x, p: await ev(x) };
    // An exact zero while walking is flatness (every softmax one-hot in f32: H = NLL = 0), not
    // a stationary point: keep walking; only a sign change brackets the minimum.
    if (b.p.slope !== 0 && Math.sign(b.p.slope) !== sign0) return { a, b };
    a = b;
  }
}

/** Brent's root finder (zeroin) on the slope in log T, to `xtol`, inside the bracket [a, b]. */
async function _zeroin<P extends FitStep>(
  ev: (logT: number) => Promise<P>,
  at: _At<P>,
  bt: _At<P>,
  xtol: number,
): Promise<P> {
  const EPS = Number.EPSILON;
  let a = at.x, fa = at.p.slope, pa = at.p, b = bt.x, fb = bt.p.slope, bp = bt.p;
  let c = a, fc = fa, cp = pa, d = b - a, e = d;
  for (;;) {
    if ((fb > 0 && fc > 0) || (fb < 0 && fc < 0)) {
      c = a;
      fc = fa;
      cp = pa;
      d = e = b - a;
    }
    if (Math.abs(fc) < Math.abs(fb)) {
      [a, fa, pa] = [b, fb, bp];
      [b, fb, bp] = [c, fc, cp];
      [c, fc, cp] = [a, fa, pa];
    }
    const tol1 = 2 * EPS * Math.abs(b) + 0.5 * xtol;
    const xm = 0.5 * (c - b);
    if (Math.abs(xm) <= tol1 || fb === 0) return bp;
    if (Math.abs(e) >= tol1 && Math.abs(fa) > Math.abs(fb)) {
      const s = fb / fa;
      let p: number, q: number;
      if (a === c) {
        p = 2 * xm * s;
        q = 1 - s;
      } else {
        const qq = fa / fc, r = fb / fc;
        p = s * (2 * xm * qq * (qq - r) - (b - a) * (r - 1));
        q = (qq - 1) * (r - 1) * (s - 1);
      }
      if (p > 0) q = -q;
      p = Math.abs(p);
      if (2 * p < Math.min(3 * xm * q - Math.abs(tol1 * q), Math.abs(e * q))) {
        e = d;
        d = p / q;
      } else {
        d = xm;
        e = d;
      }
    } else {
      d = xm;
      e = d;
    }
    a = b;
    fa = fb;
    pa = bp;
    b += Math.abs(d) > tol1 ? d : (xm > 0 ? tol1 : -tol1);
    bp = await ev(b);
    fb = bp.slope;
  }
}
