/**
 * Seeded shape fuzzing of the methods against the float64 reference. One integer seed fixes one
 * whole case: the method (`METHODS[seed mod count]`), n, v and d (often tile sizes ± 1 and small
 * primes, otherwise log-uniform up to a few hundred), β (0 and 1 included), softcap on or off,
 * reduction, the fraction of ignored rows (all of them, for sum and none), the upstream gradient,
 * the dtype (f16 only where the adapter has shader-f16), the scale of the inputs and whether the
 * context splits every tensor into 4 KiB bindings. A failing case is replayed with
 * `deno run -A scripts/fuzz.ts --seed S --cases 1`.
 *
 * Each method is held to the tolerance its own tests use ({@link methodTolerance}), relative to
 * each array's largest reference value as in testing/parity.ts, except where that value is only
 * the roundoff of terms that cancel, plus, when a method reports tiles skipped by its gradient
 * filter, what the filter may drop (see {@link assertMatchesReference}).
 * @module
 */
import { GpuContext } from "../gpu/context.ts";
import {
  type Dtype,
  type HostInputs,
  IGNORE_INDEX,
  type LceOptions,
  type Reduction,
  resolveOptions,
} from "../core/options.ts";
import type { LceMethod } from "../methods/types.ts";
import { Rng } from "../fixtures/rng.ts";
import { caseInputs, gradRoundingTol, PARITY_TOL, type ParityCase } from "./parity.ts";
import { caseGradOutput, caseOptions, roundedLogitsTolerance } from "./rounded_logits_tol.ts";
import { runMethod, type RunResult } from "../methods/run.ts";
import { lceReference, type LceReferenceResult } from "../reference/lce_reference.ts";
import { assertClose } from "../reference/compare.ts";
import { defaultFilterEps } from "../kernels/fused/backward_plan.ts";
import { GpuError } from "../core/errors.ts";

/** Sizes drawn often: 1, small primes, GEMM K-steps and tiles ± 1 (16, 64, 128, 256). */
export const SPECIAL_SIZES: readonly number[] = [
  1,
  2,
  3,
  5,
  7,
  13,
  15,
  16,
  17,
  31,
  32,
  33,
  61,
  63,
  64,
  65,
  97,
  127,
  128,
  129,
  251,
  255,
  256,
  257,
];

/** The per-binding limit of the sharded fuzz context: a few rows of E, C and logits per shard. */
export const FUZZ_SHARD_BYTES = 4096;

/** Bounds of the drawn shapes. */
export interface FuzzBounds {
  /** Largest n, v or d (default 300). */
  maxDim: number;
  /** Largest n·v·d (default 3·10⁶): bigger draws are redrawn, to bound the time of a case. */
  maxWork: number;
}

/** Default {@link FuzzBounds}. */
export const DEFAULT_BOUNDS: FuzzBounds = { maxDim: 300, maxWork: 3e6 };

/** One fuzz case: a parity case plus the method, its seed and the context it runs on. */
export interface FuzzCase extends ParityCase {
  /** The method's name. */
  method: string;
  /** The seed that produced this case. */
  seed: number;
  /** Every target is ignore_index (reduction sum or none: loss and gradients are 0). */
  allIgnored?: boolean;
  /** Per-binding byte limit of the context (undefined: the adapter's). */
  maxBindingBytes?: number;
  /** Why the method cannot run this case on this context (the case is skipped). */
  skip?: string;
}

/** What a context must tell the case generator. */
export type FuzzEnv = Pick<GpuContext, "hasF16">;

/** Sizes: a special size (35%), otherwise log-uniform in [1, maxDim]. */
function _size(rng: Rng, maxDim: number): number {
  const special = SPECIAL_SIZES.filter((s) => s <= maxDim);
  if (special.length > 0 && rng.uniform() < 0.35) return special[rng.int(special.length)];
  return Math.min(maxDim, Math.floor(Math.exp(rng.uniform() * Math.log(maxDim + 1))));
}

const _round = (x: number, digits: number) => Number(x.toFixed(digits));

/**
 * The case of `seed`, for a method of `methods` (the seed picks it). `unsupported` is asked
 * whether the method can run: a reduction it cannot do is replaced by mean, then sum; when none
 * works, the case carries `skip`.
 */
export function fuzzCase(
  seed: number,
  env: FuzzEnv,
  methods: readonly LceMethod[],
  bounds: FuzzBounds = DEFAULT_BOUNDS,
  unsupported: (m: LceMethod, c: FuzzCase) => string | undefined = () => undefined,
): FuzzCase {
  if (methods.length === 0) throw new RangeError("fuzzCase: no methods to choose from");
  const method = methods[((seed % methods.length) + methods.length) % methods.length];
  const rng = new Rng(seed, 0x5eed);
  let n = 1, v = 1, d = 1;
  for (let tries = 0; tries < 50; tries++) {
    n = _size(rng, bounds.maxDim);
    v = _size(rng, bounds.maxDim);
    d = _size(rng, bounds.maxDim);
    if (n * v * d <= bounds.maxWork) break;
  }
  while (n * v * d > bounds.maxWork) {
    if (n >= v && n >= d) n = Math.ceil(n / 2);
    else if (v >= d) v = Math.ceil(v / 2);
    else d = Math.ceil(d / 2);
  }
  const dtypes: Dtype[] = env.hasF16 ? ["f32", "bf16", "f16"] : ["f32", "bf16"];
  const dtype = dtypes[rng.int(dtypes.length)];
  const rb = rng.uniform();
  const beta = rb < 0.15 ? 0 : rb < 0.3 ? 1 : _round(rng.uniform(), 3);
  const softcap = rng.uniform() < 0.5 ? undefined : _round(0.5 + 29.5 * rng.uniform(), 2);
  const reduction = (["mean", "sum", "none"] as const)[rng.int(3)];
  const ri = rng.uniform();
  const allIgnored = ri < 0.08;
  const ignoreFraction = ri < 0.45 ? 0 : _round(0.8 * rng.uniform(), 3);
  const rg = rng.uniform();
  const scalarGrad = rg < 0.2 ? 1 : _round(6 * rng.uniform() - 3, 3);
  const vectorGrad = rng.uniform() < 0.5;
  const scale = rng.uniform() < 0.6
    ? undefined
    : _round((0.5 + 1.5 * rng.uniform()) / Math.sqrt(Math.sqrt(d)), 4);
  const sharded = rng.uniform() < 0.25;
  const c: FuzzCase = {
    method: method.name,
    seed,
    n,
    v,
    d,
    dtype,
    beta,
    softcap,
    reduction,
    ignoreFraction,
    gradOutput: scalarGrad,
    scale,
    maxBindingBytes: sharded ? FUZZ_SHARD_BYTES : undefined,
  };
  const grad = { scalar: scalarGrad, vector: vectorGrad };
  _setReduction(c, reduction, grad, allIgnored);
  let why = unsupported(method, c);
  for (const r of ["mean", "sum"] as const) {
    if (why === undefined || r === reduction) continue;
    _setReduction(c, r, grad, allIgnored);
    why = unsupported(method, c);
  }
  if (why !== undefined) c.skip = why;
  return c;
}

function _setReduction(
  c: FuzzCase,
  r: Reduction,
  grad: { scalar: number; vector: boolean },
  allIgnored: boolean,
) {
  c.reduction = r;
  c.gradOutput = r === "none" && grad.vector ? "vector" : grad.scalar;
  // An all-ignored mean is undefined (an InputError): such cases ignore 90% instead.
  c.allIgnored = allIgnored && r !== "mean" ? true : undefined;
  if (allIgnored && r === "mean") c.ignoreFraction = 0.9;
}

/** Methods whose logits and their gradient are stored in the input dtype (16-bit for bf16/f16). */
const ROUNDED_LOGITS = /^(chunked\d*|compiled)$/;

/**
 * The tolerance a method's own tests hold it to: PARITY_TOL, except for the methods that store the
 * logits and their gradient in the input dtype (chunked, compiled), which get
 * testing/rounded_logits_tol.ts (PARITY_TOL plus the first-order effect of that rounding).
 */
export function methodTolerance(
  method: LceMethod | string,
  c: ParityCase,
): { atol: number; rtol: number } {
  const name = typeof method === "string" ? method : method.name;
  return ROUNDED_LOGITS.test(name) ? roundedLogitsTolerance(c) : PARITY_TOL[c.dtype];
}

const _maxAbs = (a: ArrayLike<number>) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
};

/** What {@link termScales} returns. */
export interface TermScales {
  loss: number;
  dE: number;
  dC: number;
  /**
   * The gradient filter's largest legitimate drop (as in methods/fused_test.ts): ĝ, the largest
   * filter value below ε, times max |w_n|·Σ_v |C_vk| (dE) or max Σ_n |w_n·E_nk| (dC).
   */
  filter: { ghat: number; dE: number; dC: number };
}

/**
 * Scales of the terms each output is a sum of: per row |LSE| + (1−β)|z_t| + (β/v)|Σz| for the
 * loss (max over rows, or their sum for reduction sum), and with g_nj = |w_n|·(p_nj + a_nj) the
 * size of the logit-gradient terms, max Σ_j g_nj·|C_jk| for dE and max Σ_n g_nj·|E_nk| for dC.
 * f32 roundoff of the GPU is relative to these, not to the (possibly cancelled) result. With
 * `filterEps`, also what a gradient filter with that threshold may drop.
 */
export function termScales(
  x: HostInputs,
  o: LceOptions,
  gradOutput: number | ArrayLike<number>,
  ref: LceReferenceResult,
  filterEps = 0,
): TermScales {
  const { n, v, d } = x;
  const t = ref.perToken;
  let lossMax = 0, lossSum = 0, ghat = 0;
  const dE = new Float64Array(n * d), dC = new Float64Array(v * d);
  const absC = new Float64Array(d), absWE = new Float64Array(d);
  let wmax = 0;
  for (let j = 0; j < v; j++) for (let k = 0; k < d; k++) absC[k] += Math.abs(x.c[j * d + k]);
  const z = new Float64Array(v);
  for (let i = 0; i < n; i++) {
    if (x.targets[i] === o.ignoreIndex) continue;
    const row = Math.abs(t.lse[i]) + (1 - o.beta) * Math.abs(t.targetLogit[i]) +
      (o.beta / v) * Math.abs(t.logitSum[i]);
    lossMax = Math.max(lossMax, row);
    lossSum += row;
    const gi = typeof gradOutput === "number" ? gradOutput : gradOutput[i];
    const w = Math.abs(o.reduction === "mean" ? gi / ref.count : gi);
    wmax = Math.max(wmax, w);
    for (let k = 0; k < d; k++) absWE[k] += w * Math.abs(x.e[i * d + k]);
    for (let j = 0; j < v; j++) {
      let acc = 0;
      for (let k = 0; k < d; k++) acc += x.e[i * d + k] * x.c[j * d + k];
      z[j] = o.softcap === undefined ? acc : o.softcap * Math.tanh(acc / o.softcap);
    }
    for (let j = 0; j < v; j++) {
      const a = (j === x.targets[i] ? 1 - o.beta : 0) + o.beta / v;
      const p = Math.exp(z[j] - t.lse[i]);
      // What the gradient filter compares with ε (kernels/fused/backward.ts): p·σ' + (β/v)(z/s)².
      const q = o.softcap === undefined ? 0 : z[j] / o.softcap;
      const f = p * (1 - q * q) + (o.beta / v) * q * q;
      if (f < filterEps) ghat = Math.max(ghat, f);
      const g = w * (p + a);
      for (let k = 0; k < d; k++) {
        dE[i * d + k] += g * Math.abs(x.c[j * d + k]);
        dC[j * d + k] += g * Math.abs(x.e[i * d + k]);
      }
    }
  }
  return {
    loss: o.reduction === "sum" ? lossSum : lossMax,
    dE: _maxAbs(dE),
    dC: _maxAbs(dC),
    filter: { ghat, dE: ghat * wmax * _maxAbs(absC), dC: ghat * _maxAbs(absWE) },
  };
}

/** Below this fraction of its terms' scale, a reference array is taken as cancelled to zero. */
export const CANCELLED = 2 ** -10;

/**
 * Asserts a method's result matches the float64 reference: every element within
 * atol·s + rtol·|want|, with s the array's largest |reference value| (as testing/parity.ts does).
 * When that largest value is below {@link CANCELLED} times the scale of the terms it is made of
 * ({@link termScales}) — e.g. v = 1, where loss and gradients cancel to exactly 0 and the GPU
 * returns the f32 roundoff of p = 1 — s is that term scale instead. With `filterEps` (a method
 * whose gradient filter skipped tiles), dE and dC may also differ by what the filter may drop
 * ({@link TermScales.filter}), the bound methods/fused_test.ts holds the filtered methods to.
 * Throws one line naming the array and its worst element.
 */
export function assertMatchesReference(
  got: RunResult,
  x: HostInputs,
  o: LceOptions,
  gradOutput: number | ArrayLike<number>,
  tol: { atol: number; rtol: number },
  filterEps = 0,
): void {
  const want = lceReference(x, o, gradOutput);
  const terms = termScales(x, o, gradOutput, want, filterEps);
  for (const name of ["loss", "dE", "dC"] as const) {
    let s = _maxAbs(want[name]);
    if (s < CANCELLED * terms[name]) s = terms[name];
    const dropped = name === "loss" ? 0 : terms.filter[name];
    // 16-bit gradient outputs: R roundings of partial sums bounded by the term scale
    const rounded = gradRoundingTol(got.stats, name) * Math.max(s, terms[name]);
    assertClose(got[name], want[name], {
      atol: tol.atol * (s || 1) + dropped + rounded,
      rtol: tol.rtol,
      name,
      cols: name === "loss" ? undefined : x.d,
    });
  }
}

/** The parity case of a fuzz case, with explicit all-ignored inputs where asked. */
export function parityCaseOf(c: FuzzCase): ParityCase {
  if (!c.allIgnored) return c;
  const x = caseInputs({ ...c, ignoreFraction: 0 });
  x.targets.fill(IGNORE_INDEX);
  return { ...c, inputs: x };
}

/** The case as one line of JSON (without inputs or tolerance), for failure messages. */
export function describeCase(c: FuzzCase): string {
  const { inputs: _i, tol: _t, ...rest } = c;
  return JSON.stringify(rest);
}

/** The command that replays the case of `seed`. */
export function replayCommand(seed: number): string {
  return `deno run -A scripts/fuzz.ts --seed ${seed} --cases 1`;
}

/** Outcome of one case. */
export interface FuzzOutcome {
  case: FuzzCase;
  status: "passed" | "failed" | "skipped";
  /** Failure message or skip reason. */
  message?: string;
  ms: number;
}

/** Summary of a run. */
export interface FuzzSummary {
  passed: number;
  failed: number;
  skipped: number;
  failures: FuzzOutcome[];
  /** Milliseconds per method, summed. */
  msByMethod: Record<string, number>;
}

/**
 * Runs cases against the reference on poisoned contexts: `ctx` for the adapter's bindings, and one
 * made here (and destroyed by {@link FuzzRunner.close}) for the sharded cases.
 */
export class FuzzRunner {
  readonly #ctx: GpuContext;
  readonly #methods: readonly LceMethod[];
  readonly #bounds: FuzzBounds;
  #sharded: Promise<GpuContext> | undefined;

  constructor(ctx: GpuContext, methods: readonly LceMethod[], bounds: FuzzBounds = DEFAULT_BOUNDS) {
    this.#ctx = ctx;
    this.#methods = methods;
    this.#bounds = bounds;
  }

  /** The context a case runs on. */
  async contextFor(c: FuzzCase): Promise<GpuContext> {
    if (c.maxBindingBytes === undefined) return this.#ctx;
    if (c.maxBindingBytes !== FUZZ_SHARD_BYTES) {
      throw new RangeError(`fuzz: no context for ${c.maxBindingBytes}-byte bindings`);
    }
    this.#sharded ??= GpuContext.create({
      poison: true,
      maxBindingBytes: FUZZ_SHARD_BYTES,
      engine: this.#ctx.engine,
    });
    return await this.#sharded;
  }

  /** The case of `seed` (unsupported reductions replaced, see {@link fuzzCase}). */
  caseOf(seed: number): FuzzCase {
    return fuzzCase(seed, this.#ctx, this.#methods, this.#bounds, (m, c) => {
      const opts = resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: c.reduction });
      // Asked of the adapter's context; run() asks again of the (sharded) context it runs on.
      return m.unsupported?.(this.#ctx, { n: c.n, v: c.v, d: c.d, dtype: c.dtype }, opts);
    });
  }

  /** Runs one case; a failure's message names the seed, the case and the replay command. */
  async run(c: FuzzCase): Promise<FuzzOutcome> {
    const t0 = performance.now();
    const method = this.#methods.find((m) => m.name === c.method);
    if (!method) throw new RangeError(`fuzz: unknown method ${c.method}`);
    if (c.skip) return { case: c, status: "skipped", message: c.skip, ms: 0 };
    const ctx = await this.contextFor(c);
    const opts = resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: c.reduction });
    const why = method.unsupported?.(ctx, { n: c.n, v: c.v, d: c.d, dtype: c.dtype }, opts);
    if (why !== undefined) return { case: c, status: "skipped", message: why, ms: 0 };
    const p = parityCaseOf(c);
    try {
      const x = caseInputs(p), opts = caseOptions(p), g = caseGradOutput(p);
      const got = await runMethod(ctx, method, x, opts, { dtype: c.dtype, gradOutput: g });
      const filtered = (got.stats?.tilesSkipped ?? 0) > 0;
      const eps = filtered ? defaultFilterEps(c.dtype) : 0;
      assertMatchesReference(got, x, opts, g, methodTolerance(method, p), eps);
      return { case: c, status: "passed", ms: performance.now() - t0 };
    } catch (e) {
      // On the 4 KiB-binding context a method may refuse a shape with a limits error (a
      // workspace its shards make too large for one binding): a skip, not a failure.
      if (e instanceof GpuError && e.kind === "limits" && c.maxBindingBytes !== undefined) {
        return { case: c, status: "skipped", message: `limits: ${e.message}`, ms: 0 };
      }
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      return {
        case: c,
        status: "failed",
        message: `seed ${c.seed}: ${describeCase(c)}\n  ${msg.split("\n")[0]}\n  replay: ${
          replayCommand(c.seed)
        }`,
        ms: performance.now() - t0,
      };
    }
  }

  /** Runs the cases of seeds seed, seed+1, …, seed+cases−1; `onCase` sees each outcome. */
  async runMany(
    seed: number,
    cases: number,
    onCase?: (o: FuzzOutcome, i: number) => void,
  ): Promise<FuzzSummary> {
    const s: FuzzSummary = { passed: 0, failed: 0, skipped: 0, failures: [], msByMethod: {} };
    for (let i = 0; i < cases; i++) {
      const o = await this.run(this.caseOf(seed + i));
      s[o.status]++;
      if (o.status === "failed") s.failures.push(o);
      s.msByMethod[o.case.method] = (s.msByMethod[o.case.method] ?? 0) + o.ms;
      onCase?.(o, i);
    }
    return s;
  }

  /** Destroys the sharded context, if one was made. */
  async close(): Promise<void> {
    if (this.#sharded) (await this.#sharded).destroy();
    this.#sharded = undefined;
  }
}
