/**
 * Small WGSL snippets shared by several kernels: storage types and element readers per dtype, the
 * loss options as shader constants, softcap, and the deterministic (max, sum-exp) merge used for
 * log-sum-exp.
 * @module
 */
import type { LceOptions } from "../core/options.ts";
import type { TensorDtype } from "../gpu/tensor.ts";

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
  const cap = o.capped ? o.softcap! : 0;
  return `const BETA: f32 = ${f32Lit(o.beta)};
const SOFTCAP: f32 = ${f32Lit(cap)};
const IGNORE: i32 = ${o.ignoreIndex};
const VOCAB: f32 = ${f32Lit(v)};
const NEG_INF: f32 = -3.0e38;
fn softcap(x: f32) -> f32 { ${o.capped ? `return SOFTCAP * tanh(x / SOFTCAP);` : "return x;"} }
fn softcap_grad(z: f32) -> f32 { ${
    o.capped ? "let q = z / SOFTCAP; return 1.0 - q * q;" : "return 1.0;"
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

/** Elements of `dtype` in one 16-byte vector load (8 for 16-bit types, 4 for 32-bit ones). */
export function vecWidth(dtype: TensorDtype): number {
  return dtype === "bf16" || dtype === "f16" ? 8 : 4;
}

/** WGSL storage element type for a binding of `dtype` (16-byte vectors with `vec`). */
export function wgslStorageType(dtype: TensorDtype, vec = false): string {
  if (vec) return dtype === "f32" ? "vec4<f32>" : "vec4<u32>";
  if (dtype === "f16") return "f16";
  if (dtype === "bf16" || dtype === "u32") return "u32";
  if (dtype === "i32") return "i32";
  return "f32";
}

/**
 * A WGSL expression reading element `idx` (a u32 expression) of binding `buf` as f32 (`vec`: the
 * binding is declared as 16-byte vectors and read through its `ld_` helper).
 */
export function loadF32(buf: string, dtype: TensorDtype, idx: string, vec = false): string {
  if (vec) return `ld_${buf}(${idx})`;
  if (dtype === "f32") return `${buf}[${idx}]`;
  if (dtype === "f16") return `f32(${buf}[${idx}])`;
  if (dtype === "bf16") return `bf16_${buf}(${idx})`;
  return `f32(${buf}[${idx}])`;
}

/** `enable f16;` when any dtype needs it. */
export function enableDirectives(dtypes: TensorDtype[]): string {
  return dtypes.includes("f16") ? "enable f16;\n" : "";
}

/**
 * WGSL helper functions for the bindings that need them: a bf16 reader per bf16 binding, and an
 * element reader `ld_<name>` per binding declared as 16-byte vectors (`vec`).
 */
export function dtypeHelpers(
  bindings: { name: string; dtype: TensorDtype; vec?: boolean }[],
): string {
  return bindings.map((b) => {
    if (b.vec) {
      if (b.dtype === "f32") {
        return `\nfn ld_${b.name}(i: u32) -> f32 { return ${b.name}[i >> 2u][i & 3u]; }\n`;
      }
      const word = `${b.name}[i >> 3u][(i >> 1u) & 3u]`;
      return b.dtype === "f16"
        ? `\nfn ld_${b.name}(i: u32) -> f32 { return unpack2x16float(${word})[i & 1u]; }\n`
        : `\nfn ld_${b.name}(i: u32) -> f32 {
  let w = ${word};
  return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}\n`;
    }
    if (b.dtype !== "bf16") return "";
    return `
fn bf16_${b.name}(i: u32) -> f32 {
  let w = ${b.name}[i >> 1u];
  return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
`;
  }).join("");
}
