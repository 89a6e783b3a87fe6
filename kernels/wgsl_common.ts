/**
 * Small WGSL snippets shared by several kernels: the loss options as shader constants, softcap,
 * and the deterministic (max, sum-exp) merge used for log-sum-exp.
 * @module
 */
import type { LceOptions } from "../core/options.ts";

/** WGSL literal of a finite f32 (always with a decimal point or exponent). */
export function f32Lit(x: number): string {
  const f = Math.fround(x);
  if (!Number.isFinite(f)) throw new RangeError(`non-finite constant ${x}`);
  const s = f.toPrecision(9);
  return /[.e]/.test(s) ? s : `${s}.0`;
}

/**
 * Constants of the loss baked into a shader: BETA, SOFTCAP (0 when off), IGNORE (ignore_index),
 * VOCAB (|V| as f32), and `fn softcap(x) -> f32` and `fn softcap_grad(z) -> f32` (∂z/∂x at the
 * capped value z; 1 without softcap).
 */
export function lossConstants(o: LceOptions, v: number): string {
  const cap = o.softcap ?? 0;
  return `const BETA: f32 = ${f32Lit(o.beta)};
const SOFTCAP: f32 = ${f32Lit(cap)};
const IGNORE: i32 = ${o.ignoreIndex};
const VOCAB: f32 = ${f32Lit(v)};
const NEG_INF: f32 = -3.0e38;
fn softcap(x: f32) -> f32 { ${cap > 0 ? `return SOFTCAP * tanh(x / SOFTCAP);` : "return x;"} }
fn softcap_grad(z: f32) -> f32 { ${
    cap > 0 ? "let q = z / SOFTCAP; return 1.0 - q * q;" : "return 1.0;"
  } }
`;
}

/**
 * `fn lse_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32>` merging (max, Σexp(z − max)) pairs:
 * the result's max is max(a.x, b.x) and each sum is rescaled by exp(its max − new max) ≤ 1, so no
 * term overflows; merging in a fixed order makes the result independent of scheduling.
 */
export const LSE_MERGE = `fn lse_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let m = max(a.x, b.x);
  if (m <= NEG_INF) { return vec2<f32>(NEG_INF, 0.0); }
  return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}
`;
