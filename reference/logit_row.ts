/**
 * One row of logits in float64: z_v = E_n·C_v, optionally softcapped (z ← s·tanh(z/s)). Shared by
 * the reference loss and the fixture statistics, which both walk the n×v logit matrix row by row.
 * @module
 */
import type { Shape } from "../core/options.ts";

/**
 * Inputs the CPU reference accepts: like {@link HostInputs} (E n×d, C v×d row-major, targets of
 * length n) but with any numeric arrays, so finite differences can perturb E and C in float64.
 */
export interface ReferenceInputs extends Shape {
  /** E, n×d row-major. */
  e: ArrayLike<number>;
  /** C, v×d row-major. */
  c: ArrayLike<number>;
  /** Target class per row, or the ignore index. */
  targets: ArrayLike<number>;
}

/** E and C widened to float64 once, for fast row loops. */
export interface WideInputs extends Shape {
  /** E, n×d row-major, float64. */
  e: Float64Array;
  /** C, v×d row-major, float64. */
  c: Float64Array;
}

/** Widens E and C to float64 (copies, so later changes to the inputs do not leak in). */
export function widen(x: ReferenceInputs): WideInputs {
  return { n: x.n, v: x.v, d: x.d, e: Float64Array.from(x.e), c: Float64Array.from(x.c) };
}

/**
 * Writes row `row` of the logits into `out` (length ≥ v): z_v = E_row·C_v, then
 * z ← s·tanh(z/s) when `softcap` is set. Returns `out`.
 */
export function logitRow(
  x: WideInputs,
  row: number,
  out: Float64Array,
  softcap?: number,
): Float64Array {
  const { v, d, e, c } = x;
  const eo = row * d;
  const d4 = d - (d % 4);
  for (let j = 0; j < v; j++) {
    const co = j * d;
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    let k = 0;
    for (; k < d4; k += 4) {
      s0 += e[eo + k] * c[co + k];
      s1 += e[eo + k + 1] * c[co + k + 1];
      s2 += e[eo + k + 2] * c[co + k + 2];
      s3 += e[eo + k + 3] * c[co + k + 3];
    }
    for (; k < d; k++) s0 += e[eo + k] * c[co + k];
    out[j] = (s0 + s1) + (s2 + s3);
  }
  if (softcap !== undefined) {
    for (let j = 0; j < v; j++) out[j] = softcap * Math.tanh(out[j] / softcap);
  }
  return out;
}

/** Row statistics of a logit row: max (first index on ties) and log-sum-exp, max-subtracted. */
export interface RowLse {
  /** max_v z_v. */
  max: number;
  /** First index of the max. */
  argmax: number;
  /** log Σ_v exp(z_v). */
  lse: number;
}

/** Max, argmax and log-sum-exp of the first `v` entries of `z`, computed stably. */
export function rowLse(z: Float64Array, v: number): RowLse {
  let max = -Infinity;
  let argmax = 0;
  for (let j = 0; j < v; j++) {
    if (z[j] > max) {
      max = z[j];
      argmax = j;
    }
  }
  let s = 0;
  for (let j = 0; j < v; j++) s += Math.exp(z[j] - max);
  return { max, argmax, lse: max + Math.log(s) };
}
