/**
 * WGSL of the exact terms of the gradient (kernels/fused/corrections.ts): the target
 * coefficients, dE's and dC's initial rows, the (target, token) pairs and the target scatter.
 * @module
 */
import type { Dtype, LceOptions } from "../../core/options.ts";
import {
  dtypeHelpers,
  enableDirectives,
  f32Lit,
  loadF32,
  lossConstants,
  wgslStorageType,
} from "../wgsl_common.ts";
import { type Dtype16, wgslFrom16, wgslTo16 } from "../cast16.ts";
import { signature, u32s } from "../../gpu/signature.ts";

const DOT_WG = 64;
const SCATTER_WG = 128;

/** Whether the target terms exist (β < 1) and the smoothing terms exist (β > 0). */
export function correctionTerms(o: LceOptions): { target: boolean; smooth: boolean } {
  return { target: o.targetTerm, smooth: o.smoothing };
}

/** The plain target coefficients' signature: n tokens; targets, the row weights w, a. */
export const TARGET_COEF_PLAIN_SIG = signature({
  params: { n: "u32" },
  bindings: {
    targets: { elem: "i32", access: "read" },
    w: { elem: "f32", access: "read" },
    a: { elem: "f32", access: "read_write" },
  },
});

/**
 * The softcap target coefficients' signature: the E shard's eRows rows from eR0, the C shard's
 * cRows from cR0, depth d, first (write 0 for ignored tokens); E, C, targets, w, a.
 */
export function targetCoefSoftcapSignature(dtype: Dtype) {
  return signature({
    params: { eRows: "u32", eR0: "u32", cRows: "u32", cR0: "u32", d: "u32", first: "u32" },
    bindings: {
      e: { elem: wgslStorageType(dtype), access: "read" },
      c: { elem: wgslStorageType(dtype), access: "read" },
      targets: { elem: "i32", access: "read" },
      w: { elem: "f32", access: "read" },
      a: { elem: "f32", access: "read_write" },
    },
  });
}

/**
 * dE initialisation's signature: the dE shard's rows from oR0, the C shard's cRows from cR0, depth
 * d, first; C, targets, a, w, Σ_v C_v (csum), dE.
 */
export function dEInitSignature(dtype: Dtype) {
  return signature({
    params: { rows: "u32", oR0: "u32", cRows: "u32", cR0: "u32", d: "u32", first: "u32" },
    bindings: {
      c: { elem: wgslStorageType(dtype), access: "read" },
      targets: { elem: "i32", access: "read" },
      a: { elem: "f32", access: "read" },
      w: { elem: "f32", access: "read" },
      csum: { elem: "f32", access: "read" },
      de: { elem: "f32", access: "read_write" },
    },
  });
}

/** dC initialisation's signature: a dC shard of rows × d (f32, or 16-bit as u32 words); r. */
export function dCInitSignature(dcElem: string) {
  return signature({
    params: { rows: "u32", d: "u32" },
    bindings: {
      rvec: { elem: "f32", access: "read" },
      dc: { elem: dcElem, access: "read_write" },
    },
  });
}

/**
 * The target pairs' signature: n tokens, count pairs (padded); targets, the pairs, and with
 * `skipFolded` the tokens' flags of a dC pass that added their target terms itself
 * (kernels/fused/kept_tiles.ts, foldTargets).
 */
export function targetPairsSignature(skipFolded = false) {
  return signature({
    params: { n: "u32", count: "u32" },
    bindings: {
      targets: { elem: "i32", access: "read" },
      pairs: { elem: "vec2<u32>", access: "read_write" },
      folded: { elem: "u32", access: "read", when: skipFolded },
    },
  });
}

/** The bindings both target scatters share: the sorted (target, token) pairs, a, E's shard. */
function _scatterBindings(dtype: Dtype) {
  return {
    pairs: { elem: "vec2<u32>", access: "read" },
    a: { elem: "f32", access: "read" },
    e: { elem: wgslStorageType(dtype), access: "read" },
  } as const;
}

/**
 * The f32 target scatter's signature: the E shard's eRows rows from eR0, the dC shard's dRows from
 * dR0, d, n pairs; the pairs, a, E, dC.
 */
export function targetScatterSignature(dtype: Dtype) {
  return signature({
    params: { eRows: "u32", eR0: "u32", dRows: "u32", dR0: "u32", d: "u32", n: "u32" },
    bindings: { ..._scatterBindings(dtype), dc: { elem: "f32", access: "read_write" } },
  });
}

/** The 16-bit target scatter's: as {@link targetScatterSignature} with first, and r. */
export function targetScatter16Signature(dtype: Dtype) {
  return signature({
    params: u32s("eRows eR0 dRows dR0 d n first"),
    bindings: {
      ..._scatterBindings(dtype),
      rvec: { elem: "f32", access: "read" },
      dc: { elem: "u32", access: "read_write" },
    },
    layout: { pad: ["_b"] },
  });
}

/** WGSL of the target coefficients a_n = −w_n(1−β)·f'(z_t) without softcap (f' = 1): elementwise. */
export function targetCoefPlainWgsl(o: LceOptions): string {
  return `${TARGET_COEF_PLAIN_SIG.wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= P.n) { return; }
  a[i] = select(-w[i] * ${f32Lit(1 - o.beta)}, 0.0, targets[i] == ${o.ignoreIndex});
}
`;
}

/**
 * WGSL of the target coefficients with softcap: one workgroup per token recomputes
 * z_t = softcap(E_n·C_{t_n}) when t_n lies in the bound C shard.
 */
export function targetCoefSoftcapWgsl(o: { dtype: Dtype; opts: LceOptions; v: number }): string {
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
${targetCoefSoftcapSignature(o.dtype).wgsl}
${dtypeHelpers([{ name: "e", dtype: o.dtype }, { name: "c", dtype: o.dtype }])}
var<workgroup> red: array<f32, ${DOT_WG}>;
var<workgroup> s_t: i32;
@compute @workgroup_size(${DOT_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var r = wg.x; r < P.eRows; r += nwg.x) {
    let n = P.eR0 + r;
    if (lid == 0u) { s_t = targets[n]; }
    let t = workgroupUniformLoad(&s_t);
    workgroupBarrier(); // s_t is rewritten by the next row
    if (t == IGNORE) {
      if (lid == 0u && P.first != 0u) { a[n] = 0.0; }
      continue;
    }
    let tu = u32(t);
    if (tu < P.cR0 || tu >= P.cR0 + P.cRows) { continue; }
    var acc = 0.0;
    for (var k = lid; k < P.d; k += ${DOT_WG}u) {
      acc = fma(${loadF32("e", o.dtype, "r * P.d + k")}, ${
    loadF32("c", o.dtype, "(tu - P.cR0) * P.d + k")
  }, acc);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = ${DOT_WG / 2}u; s > 0u; s >>= 1u) {
      if (lid < s) { red[lid] += red[lid + s]; }
      workgroupBarrier();
    }
    if (lid == 0u) { a[n] = -w[n] * (1.0 - BETA) * softcap_grad(softcap(red[0])); }
    workgroupBarrier();
  }
}
`;
}

/**
 * WGSL initialising dE: dE_n = b_n·ΣC + a_n·C_{t_n} (the C row added by the dispatch of the C shard
 * holding it).
 */
export function dEInitWgsl(o: { dtype: Dtype; opts: LceOptions; v: number }): string {
  const { target, smooth } = correctionTerms(o.opts);
  return `${enableDirectives([o.dtype])}
${lossConstants(o.opts, o.v)}
${dEInitSignature(o.dtype).wgsl}
${dtypeHelpers([{ name: "c", dtype: o.dtype }])}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let total = P.rows * P.d;
  for (var i = gid.x; i < total; i += nwg.x * 256u) {
    let r = i / P.d;
    let k = i % P.d;
    let n = P.oR0 + r;
    let t = targets[n];
    let inC = ${target ? "t != IGNORE && u32(t) >= P.cR0 && u32(t) < P.cR0 + P.cRows" : "false"};
    var val = 0.0;
    if (P.first != 0u) {
      ${smooth ? "val = -(BETA / VOCAB) * w[n] * csum[k];" : ""}
    } else {
      val = de[i];
    }
    ${
    target
      ? `if (inC) { val = fma(a[n], ${loadF32("c", o.dtype, "(u32(t) - P.cR0) * P.d + k")}, val); }`
      : ""
  }
    if (P.first != 0u || inC) { de[i] = val; }
  }
}
`;
}

/**
 * WGSL of dC's value before its gradient terms at column k (f32), or of the packed 16-bit word
 * holding columns k and k + 1 (`packed`, k even): the smoothing row r = −(β/|V|)·Σ_n w_n E_n, bound
 * as `rvec`, or 0 when β = 0. The dC smoothing term writes it into every row; the dC split puts it
 * back into the rows it borrowed (kernels/fused/dc_split.ts).
 */
export function dCInitValueWgsl(o: LceOptions, k: string, packed: boolean): string {
  if (!correctionTerms(o).smooth) return packed ? "0u" : "0.0";
  return packed ? `(to16(rvec[${k}]) | (to16(rvec[${k} + 1u]) << 16u))` : `rvec[${k}]`;
}

/** WGSL initialising dC: every row = r (or 0 when β = 0). */
export function dCInitWgsl(o: LceOptions): string {
  return `${dCInitSignature("f32").wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let total = P.rows * P.d;
  for (var i = gid.x; i < total; i += nwg.x * 256u) {
    dc[i] = ${dCInitValueWgsl(o, "(i % P.d)", false)};
  }
}
`;
}

/**
 * WGSL initialising a packed 16-bit dC (d even: a word never straddles rows): every row = r
 * rounded to nearest even (or 0 when β = 0); one thread per word.
 */
export function dCInit16Wgsl(o: LceOptions, dtype: Dtype16): string {
  return `${dCInitSignature("u32").wgsl}
${wgslTo16(dtype)}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let words = P.rows * P.d / 2u;
  for (var i = gid.x; i < words; i += nwg.x * 256u) {
    dc[i] = ${dCInitValueWgsl(o, "((2u * i) % P.d)", true)};
  }
}
`;
}

/**
 * WGSL filling the token pairs (target as u32, token index). An ignored token's target is
 * 0xFFFFFFFF, the padding's, and so with `skipFolded` is a token whose target term the dC pass
 * added itself: the sort moves them past the runs, and the scatter walks none of them (a frequent
 * target's run, whose tile every token tile keeps, is then empty, not walked token by token).
 */
export function targetPairsWgsl(o: LceOptions, skipFolded = false): string {
  const skip = `t == ${o.ignoreIndex} || t < 0${skipFolded ? " || folded[i] != 0u" : ""}`;
  return `${targetPairsSignature(skipFolded).wgsl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < P.count; i += nwg.x * 256u) {
    var p = vec2<u32>(0xffffffffu, 0xffffffffu);
    if (i < P.n) {
      let t = targets[i];
      p = vec2<u32>(select(u32(t), 0xffffffffu, ${skip}), i);
    }
    pairs[i] = p;
  }
}
`;
}

/**
 * The head of both target scatters' loop: each workgroup takes runs of equal targets (a run starts
 * where the target changes) whose dC row lies in the bound dC shard; padding pairs are skipped.
 * The run's end (`end`, exclusive) is found by binary search (the pairs are sorted by target), so
 * that the loop over its tokens has a known bound and loads ahead.
 */
const _SCATTER_RUNS = `  for (var i = wg.x; i < P.n; i += nwg.x) {
    let key = pairs[i].x;
    if (key == 0xffffffffu || key < P.dR0 || key >= P.dR0 + P.dRows) { continue; }
    if (i > 0u && pairs[i - 1u].x == key) { continue; }
    var lo = i + 1u;
    var hi = P.n;
    while (lo < hi) {
      let mid = (lo + hi) / 2u;
      if (pairs[mid].x == key) { lo = mid + 1u; } else { hi = mid; }
    }
    let end = lo;`;

/** Tokens of a run a scatter thread loads ahead of its additions (the run loop's unrolling). */
const SCATTER_UNROLL = 8;
/** Column groups a scatter thread holds (independent sums, SCATTER_WG apart). */
const SCATTER_LANES = 4;

/**
 * Columns of dC one workgroup of a target scatter adds (the grid's y dimension covers d with
 * these): a long run of one target (a frequent token) is then walked by ⌈d / this⌉ workgroups side
 * by side, not by one workgroup ⌈d / this⌉ times.
 */
export function scatterColumnsPerGroup(dc16: boolean): number {
  return (dc16 ? 2 : 1) * SCATTER_LANES * SCATTER_WG;
}

/**
 * The loop of a scatter thread over the tokens [i, end) of a run: for each column expression of
 * `cols` (u32, in bounds where its guard `ok_<c>` holds) it adds a_n·E_n[col] into `acc_<c>` in
 * token order (so each sum's order is the run's), tokens outside the bound E shard adding nothing
 * (a zero weight: E is finite); `hit` tells whether any token was inside. SCATTER_UNROLL tokens'
 * loads are issued before their additions.
 */
function _scatterRunLoop(dtype: Dtype, cols: string[]): string {
  const tok = (u: number, j: string) =>
    `let p${u} = pairs[${j}]; let in${u} = p${u}.y >= P.eR0 && p${u}.y < P.eR0 + P.eRows; ` +
    `let w${u} = select(0.0, a[p${u}.y], in${u}); ` +
    `let eo${u} = select(0u, (p${u}.y - P.eR0) * P.d, in${u}); hit = hit || in${u};`;
  const loads = (u: number) =>
    cols.map((c, ci) =>
      `let x${u}_${ci} = select(0.0, ${
        loadF32("e", dtype, `eo${u} + min(${c}, P.d - 1u)`)
      }, ok_${ci});`
    ).join(" ");
  const adds = (u: number) =>
    cols.map((_, ci) => `acc_${ci} = fma(w${u}, x${u}_${ci}, acc_${ci});`).join(" ");
  const us = [...Array(SCATTER_UNROLL).keys()];
  return `var j = i;
      loop {
        if (j + ${SCATTER_UNROLL}u > end) { break; }
        ${us.map((u) => tok(u, `j + ${u}u`)).join("\n        ")}
        ${us.map(loads).join("\n        ")}
        ${us.map(adds).join("\n        ")}
        j += ${SCATTER_UNROLL}u;
      }
      for (; j < end; j++) {
        ${tok(0, "j")}
        ${loads(0)}
        ${adds(0)}
      }`;
}

/** Declarations of scatter lanes: column col_c (from `col(c)`), its guard ok_c, its sum acc_c. */
function _lanes(count: number, col: (c: number) => string): string {
  return [...Array(count).keys()].map((c) =>
    `let col_${c} = ${col(c)}; let ok_${c} = col_${c} < P.d; var acc_${c} = 0.0;`
  ).join("\n      ");
}

/** The column names of {@link _lanes}. */
function _laneCols(count: number): string[] {
  return [...Array(count).keys()].map((c) => `col_${c}`);
}

/**
 * WGSL of the target scatter: one workgroup per run of equal targets in the sorted pairs adds
 * Σ_run a_n·E_n (tokens of the bound E shard, in token order) into dC row t.
 */
export function targetScatterWgsl(dtype: Dtype): string {
  return `${enableDirectives([dtype])}
${targetScatterSignature(dtype).wgsl}
${dtypeHelpers([{ name: "e", dtype }])}
@compute @workgroup_size(${SCATTER_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
${_SCATTER_RUNS}
    {
      let kb = wg.y * ${scatterColumnsPerGroup(false)}u;
      ${_lanes(SCATTER_LANES, (c) => `kb + lid + ${c * SCATTER_WG}u`)}
      var hit = false;
      ${_scatterRunLoop(dtype, _laneCols(SCATTER_LANES))}
      if (hit) {
        ${
    [...Array(SCATTER_LANES).keys()].map((c) =>
      `if (ok_${c}) { let o = (key - P.dR0) * P.d + col_${c}; dc[o] = dc[o] + acc_${c}; }`
    ).join("\n        ")
  }
      }
    }
  }
}
`;
}

/**
 * WGSL of the target scatter into a packed 16-bit dC (d even): as {@link targetScatterWgsl}, one
 * thread per word (columns k, k + 1). The first E shard's dispatch (first ≠ 0) adds the run's sum to
 * the f32 smoothing row r instead of the stored value, so a target row is rounded once (with E in
 * one binding).
 */
export function targetScatter16Wgsl(
  dtype: Dtype,
  out: Dtype16,
  smooth: boolean,
): string {
  return `${enableDirectives([dtype])}
${targetScatter16Signature(dtype).wgsl}
${dtypeHelpers([{ name: "e", dtype }])}
${wgslTo16(out)}${wgslFrom16(out)}
@compute @workgroup_size(${SCATTER_WG})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
${_SCATTER_RUNS}
    {
      let kb = wg.y * ${scatterColumnsPerGroup(true)}u;
      ${_lanes(2 * SCATTER_LANES, (c) => `kb + 2u * lid + ${(c >> 1) * 2 * SCATTER_WG + (c & 1)}u`)}
      var hit = false;
      ${_scatterRunLoop(dtype, _laneCols(2 * SCATTER_LANES))}
      if (hit) {
        ${
    [...Array(SCATTER_LANES).keys()].map((q) => {
      const [c0, c1] = [2 * q, 2 * q + 1];
      return `if (ok_${c0}) {
          let k = col_${c0};
          let o = ((key - P.dR0) * P.d + k) >> 1u;
          let old = dc[o];
          var b0 = from16(old & 0xffffu);
          var b1 = from16(old >> 16u);
          if (P.first != 0u) { b0 = ${smooth ? "rvec[k]" : "0.0"}; b1 = ${
        smooth ? "rvec[k + 1u]" : "0.0"
      }; }
          dc[o] = to16(b0 + acc_${c0}) | (to16(b1 + acc_${c1}) << 16u);
        }`;
    }).join("\n        ")
  }
      }
    }
  }
}
`;
}
