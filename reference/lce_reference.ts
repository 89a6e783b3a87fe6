/**
 * The float64 CPU oracle of the label-smoothed linear cross-entropy: loss, per-token statistics
 * and the gradients dE, dC. It walks the logit matrix row by row (never allocating n×v), so it
 * handles n·v of a few million in seconds.
 *
 * Definitions (as PyTorch `cross_entropy(E @ C.T, t, label_smoothing=β, ignore_index, reduction)`,
 * with an optional softcap z = s·tanh(x/s) of the raw logits x = E·Cᵀ):
 * - loss_n = LSE_n − (1−β)·z_{n,t_n} − (β/v)·Σ_v z_nv, 0 for ignored rows;
 * - reduction none: the vector; sum: Σ_n; mean: Σ_n / (number of non-ignored rows);
 * - with upstream gradient g and row weight w_n (g for sum, g/count for mean, g_n for none, 0 for
 *   ignored rows): ∂L/∂z_nv = w_n·(p_nv − (1−β)[v = t_n] − β/v), times 1 − (z/s)² under a
 *   softcap; dE = G·C and dC = Gᵀ·E with G = ∂L/∂x.
 * @module
 */
import { check } from "../core/errors.ts";
import { checkInputs, type HostInputs, type LceOptions, resolveOptions } from "../core/options.ts";
import { logitRow, type ReferenceInputs, rowLse, type WideInputs, widen } from "./logit_row.ts";

export type { ReferenceInputs } from "./logit_row.ts";
export {
  assertClose,
  compareArrays,
  type CompareResult,
  describeWorst,
  type Tolerance,
} from "./compare.ts";

/** Per-token statistics of the logits (computed for ignored rows too). */
export interface LcePerToken {
  /** log Σ_v exp(z_nv). */
  lse: Float64Array;
  /** z_{n,t_n}; 0 for ignored rows (they have no target). */
  targetLogit: Float64Array;
  /** Σ_v z_nv. */
  logitSum: Float64Array;
  /** max_v z_nv. */
  maxLogit: Float64Array;
  /** First index of the max logit. */
  argmax: Int32Array;
  /** Entropy of softmax(z_n) in nats. */
  entropy: Float64Array;
}

/** Everything the oracle computes, in float64. */
export interface LceReferenceResult {
  /** The loss: length 1 for mean/sum, length n for none (ignored rows 0). */
  loss: Float64Array;
  /** Per-token statistics. */
  perToken: LcePerToken;
  /** ∂L/∂E, n×d row-major (zeros when only the loss was asked for). */
  dE: Float64Array;
  /** ∂L/∂C, v×d row-major (zeros when only the loss was asked for). */
  dC: Float64Array;
  /** Number of non-ignored rows. */
  count: number;
}

/** Validates inputs and options through core/options.ts (which only reads lengths and values). */
function _validate(x: ReferenceInputs, opts: Partial<LceOptions>): LceOptions {
  const o = resolveOptions(opts);
  checkInputs(x as unknown as HostInputs, o);
  return o;
}

/** Row weights w_n from the upstream gradient (0 for ignored rows). */
function _rowWeights(
  x: ReferenceInputs,
  o: LceOptions,
  count: number,
  gradOutput: number | ArrayLike<number>,
): Float64Array {
  const w = new Float64Array(x.n);
  let scalar: number | undefined;
  if (typeof gradOutput === "number") scalar = gradOutput;
  else if (o.reduction !== "none") {
    check(
      gradOutput.length === 1,
      `gradOutput must be a scalar for reduction '${o.reduction}', got ${gradOutput.length} values`,
    );
    scalar = gradOutput[0];
  } else {
    check(
      gradOutput.length === x.n,
      `gradOutput has ${gradOutput.length} values, expected n = ${x.n} for reduction 'none'`,
    );
  }
  for (let i = 0; i < x.n; i++) {
    if (x.targets[i] === o.ignoreIndex) continue;
    const g = scalar ?? (gradOutput as ArrayLike<number>)[i];
    check(Number.isFinite(g), `gradOutput must be finite, got ${g}`);
    w[i] = o.reduction === "mean" ? g / count : g;
  }
  return w;
}

function _countValid(x: ReferenceInputs, o: LceOptions): number {
  let count = 0;
  for (let i = 0; i < x.n; i++) if (x.targets[i] !== o.ignoreIndex) count++;
  return count;
}

/** The shared row loop; gradients only when `weights` is given. */
function _run(
  x: ReferenceInputs,
  w64: WideInputs,
  o: LceOptions,
  count: number,
  weights?: Float64Array,
): LceReferenceResult {
  const { n, v, d } = x;
  const { e, c } = w64;
  const beta = o.beta;
  const s = o.softcap;
  const perToken: LcePerToken = {
    lse: new Float64Array(n),
    targetLogit: new Float64Array(n),
    logitSum: new Float64Array(n),
    maxLogit: new Float64Array(n),
    argmax: new Int32Array(n),
    entropy: new Float64Array(n),
  };
  const rowLoss = new Float64Array(n);
  const dE = new Float64Array(n * d);
  const dC = new Float64Array(v * d);
  const z = new Float64Array(v);
  const p = new Float64Array(v);
  for (let i = 0; i < n; i++) {
    logitRow(w64, i, z, s);
    const { max, argmax, lse } = rowLse(z, v);
    let sum = 0, entropy = 0;
    for (let j = 0; j < v; j++) {
      sum += z[j];
      p[j] = Math.exp(z[j] - lse);
      entropy += p[j] * (lse - z[j]); // each term ≥ 0
    }
    const t = x.targets[i];
    const ignored = t === o.ignoreIndex;
    perToken.lse[i] = lse;
    perToken.maxLogit[i] = max;
    perToken.argmax[i] = argmax;
    perToken.logitSum[i] = sum;
    perToken.entropy[i] = entropy;
    perToken.targetLogit[i] = ignored ? 0 : z[t];
    if (ignored) continue;
    rowLoss[i] = lse - (1 - beta) * z[t] - (beta === 0 ? 0 : (beta / v) * sum);
    const wi = weights?.[i] ?? 0;
    if (wi === 0) continue;
    // G_j = w·(p_j − (1−β)[j=t] − β/v)·(1 − (z_j/s)²), then dE_i += G·C, dC += Gᵀ·E_i.
    p[t] -= 1 - beta;
    const eo = i * d;
    for (let j = 0; j < v; j++) {
      let g = wi * (p[j] - beta / v);
      if (s !== undefined) g *= 1 - (z[j] / s) ** 2;
      if (g === 0) continue;
      const co = j * d;
      for (let k = 0; k < d; k++) {
        dE[eo + k] += g * c[co + k];
        dC[co + k] += g * e[eo + k];
      }
    }
  }
  const loss = o.reduction === "none" ? rowLoss : Float64Array.of(_neumaierSum(rowLoss));
  if (o.reduction === "mean") loss[0] /= count;
  return { loss, perToken, dE, dC, count };
}

/** Compensated sum (Neumaier), so sums of many row losses stay float64-accurate. */
function _neumaierSum(a: Float64Array): number {
  let s = 0, comp = 0;
  for (let i = 0; i < a.length; i++) {
    const t = s + a[i];
    comp += Math.abs(s) >= Math.abs(a[i]) ? (s - t) + a[i] : (a[i] - t) + s;
    s = t;
  }
  return s + comp;
}

/**
 * The reference loss, per-token statistics and gradients in float64. `opts` is completed with
 * core defaults and validated, and the inputs checked, both throwing InputError. `gradOutput` is
 * the upstream gradient: a scalar (default 1; broadcast for reduction none) or, for reduction
 * none, a vector of n values.
 */
export function lceReference(
  inputs: ReferenceInputs,
  opts: Partial<LceOptions>,
  gradOutput: number | ArrayLike<number> = 1,
): LceReferenceResult {
  const o = _validate(inputs, opts);
  const count = _countValid(inputs, o);
  const weights = _rowWeights(inputs, o, count, gradOutput);
  return _run(inputs, widen(inputs), o, count, weights);
}

/**
 * Only the loss (length 1, or n for reduction none), in float64: the forward half of
 * {@link lceReference}, for finite differences.
 */
export function lceLossOnly(inputs: ReferenceInputs, opts: Partial<LceOptions>): Float64Array {
  const o = _validate(inputs, opts);
  return _run(inputs, widen(inputs), o, _countValid(inputs, o)).loss;
}
