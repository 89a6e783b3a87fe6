/**
 * WGSL of the reference kernel of the correctness check (kernels/reference_check.ts): two
 * deliberately simple kernels, no shared-memory tiles, every sum compensated.
 *
 * - {@link referenceRowsWgsl}: for every row of E and every vocabulary chunk, one thread per
 *   vocabulary entry (4 rows at a time, so that C is read once per 4 rows) computes the raw logit
 *   as a dot product, caps it, and keeps a running (max, Σexp) pair, Σz and the target logit;
 *   {@link referenceRowsReduceWgsl} merges the threads in order, and each (row, chunk) partial
 *   goes to the host to be merged in float64.
 * - {@link referenceSamplesWgsl}: for each sampled row x of one side (a token of E, or a
 *   vocabulary entry of C) and each chunk of rows y of the other side, the coefficients of every
 *   pair (p·σ', σ' and σ' at the target, times the token's weight on the vocabulary side) are
 *   formed one row per thread, then each thread sums coefficient × Y over the chunk for its
 *   columns; one partial per (x, chunk) goes to the host.
 *
 * Neither kernel uses β or |V| (the host combines the β terms), so their source depends only on
 * the dtype, the softcap, d (the sample kernel's columns per thread) and the chunk sizes: one
 * compilation serves every vocabulary size and β.
 *
 * Sums: dot products in blocks of 16 products, blocks added with Neumaier's compensated sum; the
 * sample sums the same way. SPIR-V allows a driver to reassociate float additions (naga emits no
 * NoContraction), which could fold a compensation away: the blocking alone bounds the error then
 * (about (16 + d/16)·ε of Σ|terms| for a dot product), still far below the check's tolerances.
 * @module
 */
import type { Dtype, LceOptions } from "../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  loadF32,
  lossConstants,
  LSE_MERGE,
  wgslStorageType,
} from "./wgsl_common.ts";

/** Threads per workgroup of both kernels. */
export const REF_WG = 256;
/** Rows of E one workgroup of the row kernel handles together. */
export const REF_ROWS = 4;

/** `fn nadd(a, x)`: Neumaier's compensated addition of x to (sum, compensation) pairs. */
const NADD = `fn nadd(a: vec2<f32>, x: f32) -> vec2<f32> {
  let t = a.x + x;
  let c = select((x - t) + a.x, (a.x - t) + x, abs(a.x) >= abs(x));
  return vec2<f32>(t, a.y + c);
}
fn nadd3(s: ptr<function, vec3<f32>>, c: ptr<function, vec3<f32>>, x: vec3<f32>) {
  let a = *s;
  let t = a + x;
  *c = *c + select((x - t) + a, (a - t) + x, abs(a) >= abs(x));
  *s = t;
}
`;

/**
 * The row kernel (see the module doc) for `eRows` rows of E (from row `eLocal` of the shard bound,
 * row `eRowStart` of all) against chunk `chunk` of one shard of C: each thread's running
 * (max, Σexp(z − max), Σz, z at the target) of each row goes to `scratch` (vec4 per row of the
 * group and thread), merged by {@link referenceRowsReduceWgsl}. No workgroup barrier: a merge tree
 * in the kernel made lavapipe compile it for half a minute under Dawn. Bindings: params, E shard,
 * C shard, targets (n i32, all rows), scratch.
 */
export function referenceRowsWgsl(o: { dtype: Dtype; opts: LceOptions; chunk: number }): string {
  const R = [...Array(REF_ROWS).keys()];
  const each = (f: (i: number) => string, sep = "\n      ") => R.map(f).join(sep);
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, 1)}
struct Params {
  eRows: u32, eLocal: u32, eRowStart: u32, cRows: u32,
  cRowStart: u32, d: u32, chunk: u32, groups: u32,
};
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> e: array<${wgslStorageType(o.dtype)}>;
@group(0) @binding(2) var<storage, read> c: array<${wgslStorageType(o.dtype)}>;
@group(0) @binding(3) var<storage, read> targets: array<i32>;
@group(0) @binding(4) var<storage, read_write> scratch: array<vec4<f32>>;
${dtypeHelpers([{ name: "e", dtype: o.dtype }, { name: "c", dtype: o.dtype }])}
${NADD}
@compute @workgroup_size(${REF_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let v0 = P.chunk * ${o.chunk}u;
  let v1 = min(v0 + ${o.chunk}u, P.cRows);
  for (var g = wg.x; g < P.groups; g += nwg.x) {
    let r0 = g * ${REF_ROWS}u;
    ${
    R.map((i) =>
      `let row${i} = P.eLocal + min(r0 + ${i}u, P.eRows - 1u);
    let t${i} = select(-2147483647 - 1, targets[P.eRowStart + r0 + ${i}u], r0 + ${i}u < P.eRows);
    var m${i} = NEG_INF;
    var s${i} = 0.0;
    var zs${i} = vec2<f32>(0.0, 0.0);
    var zt${i} = 0.0;`
    ).join("\n    ")
  }
    for (var v = v0 + lid; v < v1; v += ${REF_WG}u) {
      ${each((i) => `var a${i} = vec2<f32>(0.0, 0.0);`)}
      var k = 0u;
      while (k < P.d) {
        let kend = min(k + 16u, P.d);
        ${each((i) => `var b${i} = 0.0;`, "\n        ")}
        for (; k < kend; k++) {
          let cv = ${loadF32("c", o.dtype, "v * P.d + k")};
          ${
    each((i) => `b${i} += ${loadF32("e", o.dtype, `row${i} * P.d + k`)} * cv;`, "\n          ")
  }
        }
        ${each((i) => `a${i} = nadd(a${i}, b${i});`, "\n        ")}
      }
      ${
    each((i) =>
      `let z${i} = softcap(a${i}.x + a${i}.y);
      if (z${i} > m${i}) { s${i} = s${i} * exp(m${i} - z${i}) + 1.0; m${i} = z${i}; } else { s${i} += exp(z${i} - m${i}); }
      zs${i} = nadd(zs${i}, z${i});
      if (i32(P.cRowStart + v) == t${i}) { zt${i} = z${i}; }`
    )
  }
    }
    ${
    R.map((i) =>
      `if (r0 + ${i}u < P.eRows) {
      scratch[(r0 + ${i}u) * ${REF_WG}u + lid] = vec4<f32>(m${i}, s${i}, zs${i}.x + zs${i}.y, zt${i});
    }`
    ).join("\n    ")
  }
  }
}
`;
}

/**
 * Merges the row kernel's per-thread partials of each row, in thread order, into the row's partial
 * of the chunk (vec4 per row and chunk: max, Σexp(z − max), Σz, z at the target). One thread per
 * row. Bindings: params {rows, chunk, nChunks, _}, scratch, partials.
 */
export function referenceRowsReduceWgsl(): string {
  return `const NEG_INF: f32 = -3.0e38;
struct Params { rows: u32, chunk: u32, nChunks: u32, _a: u32 };
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> scratch: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> partials: array<vec4<f32>>;
${LSE_MERGE}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = id.x; r < P.rows; r += nwg.x * 64u) {
    var acc = vec4<f32>(NEG_INF, 0.0, 0.0, 0.0);
    for (var t = 0u; t < ${REF_WG}u; t++) {
      let x = scratch[r * ${REF_WG}u + t];
      acc = vec4<f32>(lse_merge(acc.xy, x.xy), acc.z + x.z, acc.w + x.w);
    }
    partials[r * P.nChunks + P.chunk] = acc;
  }
}
`;
}

/** Which side a sample kernel's sampled rows are on. */
export type SampleSide = "token" | "vocab";

/**
 * The sample kernel (see the module doc). Bindings: params, xs (sampled rows, f32, S×d), Y shard,
 * lse (token side: one per sampled token; vocab side: one per token), weights (per token; the
 * vocab side only), targets (token side: one per sampled token; vocab side: one per token), xid
 * (the sampled vocabulary indices; vocab side only), partials (per sampled row from `sBase` on,
 * and chunk of the Y shard: 3 × d f32, Σ p·σ'·Y, Σ σ'·Y and the target's σ'·Y, weighted on the
 * vocabulary side).
 */
export function referenceSamplesWgsl(
  o: { dtype: Dtype; opts: LceOptions; d: number; side: SampleSide; chunk: number },
): string {
  const kmax = Math.max(1, Math.ceil(o.d / REF_WG));
  const token = o.side === "token";
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, 1)}
struct Params {
  yRows: u32, yRowStart: u32, d: u32, nChunks: u32,
  sBase: u32, _a: u32, _b: u32, _c: u32,
};
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<${wgslStorageType(o.dtype)}>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> wts: array<f32>;
@group(0) @binding(5) var<storage, read> tg: array<i32>;
@group(0) @binding(6) var<storage, read> xid: array<i32>;
@group(0) @binding(7) var<storage, read_write> partials: array<f32>;
${dtypeHelpers([{ name: "y", dtype: o.dtype }])}
${NADD}
var<workgroup> coef: array<vec3<f32>, ${REF_WG}>;
@compute @workgroup_size(${REF_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let s = P.sBase + wg.x;
  let y0 = wg.y * ${o.chunk}u;
  let y1 = min(y0 + ${o.chunk}u, P.yRows);
  var acc: array<vec3<f32>, ${kmax}>;
  var cmp: array<vec3<f32>, ${kmax}>;
  for (var b = y0; b < y1; b += ${REF_WG}u) {
    let yr = b + lid;
    var cf = vec3<f32>(0.0, 0.0, 0.0);
    if (yr < y1) {
      let gy = P.yRowStart + yr;
      let w = ${token ? "1.0" : "wts[gy]"};
      if (w != 0.0) {
        var a = vec2<f32>(0.0, 0.0);
        var k = 0u;
        while (k < P.d) {
          let kend = min(k + 16u, P.d);
          var bl = 0.0;
          for (; k < kend; k++) { bl += xs[s * P.d + k] * ${
    loadF32("y", o.dtype, "yr * P.d + k")
  }; }
          a = nadd(a, bl);
        }
        let z = softcap(a.x + a.y);
        let sg = softcap_grad(z);
        let p = exp(z - lse[${token ? "s" : "gy"}]);
        let hit = ${token ? "i32(gy) == tg[s]" : "tg[gy] == xid[s]"};
        cf = vec3<f32>(w * p * sg, w * sg, select(0.0, w * sg, hit));
      }
    }
    coef[lid] = cf;
    workgroupBarrier();
    let nb = min(${REF_WG}u, y1 - b);
    for (var j = 0u; j < ${kmax}u; j++) {
      let k = lid + j * ${REF_WG}u;
      if (k < P.d) {
        var s3 = acc[j];
        var c3 = cmp[j];
        var bl = vec3<f32>(0.0, 0.0, 0.0);
        for (var q = 0u; q < nb; q++) {
          bl += coef[q] * ${loadF32("y", o.dtype, "(b + q) * P.d + k")};
          if ((q & 15u) == 15u) { nadd3(&s3, &c3, bl); bl = vec3<f32>(0.0, 0.0, 0.0); }
        }
        nadd3(&s3, &c3, bl);
        acc[j] = s3;
        cmp[j] = c3;
      }
    }
    workgroupBarrier();
  }
  let base = (wg.x * P.nChunks + wg.y) * 3u * P.d;
  for (var j = 0u; j < ${kmax}u; j++) {
    let k = lid + j * ${REF_WG}u;
    if (k < P.d) {
      let r = acc[j] + cmp[j];
      partials[base + k] = r.x;
      partials[base + P.d + k] = r.y;
      partials[base + 2u * P.d + k] = r.z;
    }
  }
}
`;
}
