/**
 * Parity tolerance of methods that store the logits and their gradient in a 16-bit input dtype
 * (chunked, compiled): a first-order bound on what that rounding changes, derived below and
 * evaluated on the case's own data, added to the f32 tolerance of testing/parity.ts.
 *
 * Both roundings are to nearest even (kernels/cast16.ts), so a stored value carries a relative
 * error of at most u = 2⁻⁸ for bf16 (8 significant bits: spacing 2⁻⁷ at 1, half of it) and 2⁻¹¹
 * for f16. With x the raw logits (stored, rounded), z = softcap(x), σ' = ∂z/∂x ≤ 1, p = softmax(z),
 * a_j = (1−β)[j = t] + β/|V| and w_n the row weight:
 * - |Δz_j| ≤ ζ_j := σ'_j·u·|x_j|;
 * - loss_n = LSE − Σ a_j z_j moves by at most Σ_j |p_j − a_j|·ζ_j (reduced like the loss);
 * - Δlog p_j = Δz_j − Σ_k p_k Δz_k, so |Δp_j| ≤ p_j·(ζ_j + S), S = Σ_k p_k ζ_k;
 * - σ' = 1 − (z/s)² moves by at most 2|z_j|/s²·ζ_j;
 * - G_j = w_n(p_j − a_j)σ'_j therefore moves by at most
 *   ΔG_j = |w_n|·(σ'_j·p_j·(ζ_j + S) + |p_j − a_j|·2|z_j|ζ_j/s²) + u·|G_j| (the last term: G
 *   itself rounded to 16 bits);
 * - dE_nk = Σ_j G_nj C_jk moves by at most Σ_j ΔG_nj |C_jk|, dC_jk by Σ_n ΔG_nj |E_nk|.
 * Parity compares every element against atol·max|want|, so each array's atol is its largest bound
 * over its largest |value|, times {@link SECOND_ORDER_MARGIN} for the neglected O(u²) terms.
 * @module
 */
import { type LceOptions, resolveOptions } from "../core/options.ts";
import { lceReference } from "../reference/lce_reference.ts";
import { caseInputs, PARITY_TOL, type ParityCase } from "./parity.ts";
import { randomArray } from "./gpu.ts";

/** Factor on the first-order bound covering second-order terms (relative size ≈ u·max|x| ≤ 3%). */
export const SECOND_ORDER_MARGIN = 1.5;

/** Largest absolute change of each output that the 16-bit rounding can cause (first order). */
export interface RoundingBounds {
  loss: number;
  dE: number;
  dC: number;
}

/** Unit roundoff of round-to-nearest-even storage in a dtype. */
export function unitRoundoff(dtype: "f32" | "bf16" | "f16"): number {
  return dtype === "bf16" ? 2 ** -8 : dtype === "f16" ? 2 ** -11 : 2 ** -24;
}

/** The upstream gradient assertParity uses for a case. */
export function caseGradOutput(c: ParityCase): number | number[] {
  return c.gradOutput === "vector"
    ? Array.from(randomArray(c.n, 99), (g) => g + 0.5)
    : c.gradOutput ?? 1.7;
}

/** The case's loss options, as assertParity resolves them. */
export function caseOptions(c: ParityCase): LceOptions {
  return resolveOptions({ beta: c.beta, softcap: c.softcap, reduction: c.reduction ?? "mean" });
}

/** The first-order bounds above for a case (logits and their gradient rounded to c.dtype). */
export function roundingBounds(c: ParityCase): RoundingBounds {
  const x = caseInputs(c), o = caseOptions(c), g = caseGradOutput(c);
  const { n, v, d } = x;
  const u = unitRoundoff(c.dtype), s = o.softcap;
  let count = 0;
  for (let i = 0; i < n; i++) if (x.targets[i] !== o.ignoreIndex) count++;
  const rowLossBound = new Float64Array(n);
  const dEBound = new Float64Array(n * d), dCBound = new Float64Array(v * d);
  const raw = new Float64Array(v), z = new Float64Array(v), dz = new Float64Array(v);
  for (let i = 0; i < n; i++) {
    const t = x.targets[i];
    if (t === o.ignoreIndex) continue;
    const gi = typeof g === "number" ? g : g[i];
    const w = o.reduction === "mean" ? gi / count : gi;
    let max = -Infinity;
    for (let j = 0; j < v; j++) {
      let acc = 0;
      for (let k = 0; k < d; k++) acc += x.e[i * d + k] * x.c[j * d + k];
      raw[j] = acc;
      z[j] = s === undefined ? acc : s * Math.tanh(acc / s);
      dz[j] = s === undefined ? 1 : 1 - (z[j] / s) ** 2;
      max = Math.max(max, z[j]);
    }
    let sumExp = 0;
    for (let j = 0; j < v; j++) sumExp += Math.exp(z[j] - max);
    const lse = max + Math.log(sumExp);
    let S = 0, lossB = 0;
    for (let j = 0; j < v; j++) {
      const zeta = dz[j] * u * Math.abs(raw[j]);
      const p = Math.exp(z[j] - lse);
      S += p * zeta;
      lossB += Math.abs(p - (j === t ? 1 - o.beta : 0) - o.beta / v) * zeta;
    }
    rowLossBound[i] = lossB;
    for (let j = 0; j < v; j++) {
      const zeta = dz[j] * u * Math.abs(raw[j]);
      const p = Math.exp(z[j] - lse);
      const pa = p - (j === t ? 1 - o.beta : 0) - o.beta / v;
      const capTerm = s === undefined ? 0 : Math.abs(pa) * 2 * Math.abs(z[j]) * zeta / (s * s);
      const dG = Math.abs(w) * (dz[j] * p * (zeta + S) + capTerm) + u * Math.abs(w * pa * dz[j]);
      for (let k = 0; k < d; k++) {
        dEBound[i * d + k] += dG * Math.abs(x.c[j * d + k]);
        dCBound[j * d + k] += dG * Math.abs(x.e[i * d + k]);
      }
    }
  }
  const sum = rowLossBound.reduce((a, b) => a + b, 0);
  const loss = o.reduction === "none"
    ? Math.max(...rowLossBound)
    : o.reduction === "mean"
    ? sum / count
    : sum;
  return { loss, dE: _max(dEBound), dC: _max(dCBound) };
}

/**
 * Tolerance for {@link ParityCase.tol} of a method that rounds the logits and their gradient to the
 * case's dtype: PARITY_TOL plus, for 16-bit dtypes, the margin times the largest ratio of a bound
 * to its array's max |value|. f32 cases get PARITY_TOL unchanged (nothing is rounded).
 */
export function roundedLogitsTolerance(c: ParityCase): { atol: number; rtol: number } {
  const base = PARITY_TOL[c.dtype];
  if (c.dtype === "f32") return base;
  const b = roundingBounds(c);
  const want = lceReference(caseInputs(c), caseOptions(c), caseGradOutput(c));
  const maxAbs = (a: ArrayLike<number>) => {
    let m = 0;
    for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
    return m || 1;
  };
  const ratio = Math.max(
    b.loss / maxAbs(want.loss),
    b.dE / maxAbs(want.dE),
    b.dC / maxAbs(want.dC),
  );
  return { atol: base.atol + SECOND_ORDER_MARGIN * ratio, rtol: base.rtol };
}

/** max(0, ...a) without spreading (large arrays overflow the call stack). */
function _max(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) if (a[i] > m) m = a[i];
  return m;
}
